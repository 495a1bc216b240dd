// Node 20 (this machine's) lacks Promise.withResolvers, which the Restate SDK uses; Node 22 has
// it. Imported first by service.ts so it exists before the SDK loads.
const P = Promise as unknown as { withResolvers?: unknown };
if (typeof P.withResolvers !== "function") {
  P.withResolvers = function <T>() {
    let resolve!: (value: T | PromiseLike<T>) => void;
    let reject!: (reason?: unknown) => void;
    const promise = new Promise<T>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
export {};
