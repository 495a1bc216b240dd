// Load for the Restate peer: the same shape as `steward bench` workload (a). For each
// concurrency level: one unrecorded warm-up request per worker, then workers share a request
// counter and a deadline; each request is a new key sent as `idempotency-key` to Restate's
// ingress, which waits for the handler's result. Raw latencies go to a JSON file for
// bench/report.py, which computes every peer's statistics the same way.
import { writeFileSync } from "node:fs";

const INGRESS = process.env.INGRESS_URL ?? "http://127.0.0.1:18080";
const FIXTURE = process.env.FIXTURE_URL ?? "http://127.0.0.1:4010";
const [out, levelsArg, durationArg, requestsArg, run] = process.argv.slice(2);
const levels = levelsArg.split(",").map(Number);
const durationMs = Number(durationArg) * 1000;
const requestsMax = requestsArg === "0" ? Infinity : Number(requestsArg);

async function writes(): Promise<number> {
  const r = await fetch(`${FIXTURE}/_fixture/writes`);
  return ((await r.json()) as { total: number }).total;
}

async function one(key: string, n: number): Promise<void> {
  const r = await fetch(`${INGRESS}/Refunds/refund`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": key },
    body: JSON.stringify({ key, paymentIntent: `pi_${key}`, amount: 100 + (n % 900) }),
  });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${text.slice(0, 200)}`);
}

async function drive(c: number, phase: string, max: number) {
  let counter = 0;
  const started = performance.now();
  const latenciesUs: number[] = [];
  let errors = 0;
  let firstError: string | null = null;
  const worker = async () => {
    for (;;) {
      const n = counter++;
      if (n >= max || performance.now() - started >= durationMs) return;
      const key = `restate-${run}-c${c}-${phase}${n}`;
      const sent = performance.now();
      try {
        await one(key, n);
        latenciesUs.push(Math.round((performance.now() - sent) * 1000));
      } catch (e) {
        errors++;
        firstError ??= String(e);
      }
    }
  };
  await Promise.all(Array.from({ length: c }, worker));
  return { latenciesUs, errors, firstError, seconds: (performance.now() - started) / 1000 };
}

const results = [];
for (const c of levels) {
  await drive(c, "w", c);
  const before = await writes();
  const r = await drive(c, "m", requestsMax);
  const after = await writes();
  console.error(`restate c=${c}: ${r.latenciesUs.length} ok, ${r.errors} errors, ${(r.latenciesUs.length / r.seconds).toFixed(1)}/s`);
  results.push({ system: "restate", concurrency: c, ok: r.latenciesUs.length, errors: r.errors,
                 firstError: r.firstError, seconds: r.seconds, writes: after - before, latenciesUs: r.latenciesUs });
}
writeFileSync(out, JSON.stringify(results));
