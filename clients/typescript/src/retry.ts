/**
 * Retrying a refusal the daemon said to retry: `Busy` and its `Retry-After`.
 *
 * A `Busy` refusal (429 `busy`, 503 `shutting_down`/`disk_full`, 500
 * `store_failed` with `Retry-After`) is answered before anything is admitted,
 * so sending the same request again is safe, a job included: it is never run
 * twice. `retrying` sends it again after the `Retry-After` the daemon gave,
 * at most `attempts` times in all and never past `totalMs`; then the last
 * `Busy` rejects. Any other error rejects at once. The Python client's
 * `retrying` is the same helper (`total` in seconds there).
 */
import { Busy } from "./errors.js";

export interface RetryOptions {
  /** Calls in all, at least 1 (default 5). */
  attempts?: number;
  /** Time in all, waiting and calling, in ms (default 30 000). */
  totalMs?: number;
  /** How to wait `ms` (default a timer); a test may pass its own. */
  sleep?: (ms: number) => Promise<void>;
}

/** Calls `call()` until it does not reject with `Busy`: `await retrying(() => client.run(job))`. */
export async function retrying<T>(call: () => Promise<T>, options: RetryOptions = {}): Promise<T> {
  const attempts = options.attempts ?? 5;
  const totalMs = options.totalMs ?? 30_000;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  if (!Number.isInteger(attempts) || attempts < 1) {
    throw new RangeError(`attempts is ${attempts}; give 1 or more (1 sends the request once)`);
  }
  if (!(totalMs >= 0)) throw new RangeError(`totalMs is ${totalMs}; give 0 or more milliseconds`);
  const started = Date.now();
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (e) {
      if (!(e instanceof Busy) || attempt >= attempts) throw e;
      const waitMs = Math.max(0, e.retryAfter) * 1000;
      if (Date.now() - started + waitMs > totalMs) throw e;
      await sleep(waitMs);
    }
  }
}
