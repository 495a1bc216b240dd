// The same work as Steward's workload (a), on Restate: one durable step (`ctx.run`) that sends a
// refund to the fixture under the operation key, its result journaled. The caller names the
// operation with Restate's `idempotency-key` header, so a resend returns the recorded result.
import "./polyfill.ts";
import * as http2 from "node:http2";
import * as restate from "@restatedev/restate-sdk";

const FIXTURE = process.env.FIXTURE_URL ?? "http://127.0.0.1:4010";
const PORT = Number(process.env.SERVICE_PORT ?? "19080");

type Refund = { key: string; paymentIntent: string; amount: number };

const refunds = restate.service({
  name: "Refunds",
  handlers: {
    refund: async (ctx: restate.Context, req: Refund) => {
      return ctx.run("refund", async () => {
        const response = await fetch(`${FIXTURE}/v1/refunds`, {
          method: "POST",
          headers: {
            authorization: "Bearer sk_test_bench",
            "content-type": "application/x-www-form-urlencoded",
            "idempotency-key": req.key,
          },
          body: `payment_intent=${req.paymentIntent}&amount=${req.amount}&currency=usd`,
        });
        const body = (await response.json()) as { id?: string; status?: string };
        if (response.status >= 400 && response.status < 500) {
          throw new restate.TerminalError(`fixture answered ${response.status}`);
        }
        if (!response.ok) throw new Error(`fixture answered ${response.status}`);
        return { id: body.id, status: body.status };
      });
    },
  },
});

http2
  .createServer(restate.createEndpointHandler({ services: [refunds] }))
  .listen(PORT, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${PORT}`));
