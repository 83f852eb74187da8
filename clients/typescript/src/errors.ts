/**
 * The one error type of the client: a daemon refusal, with its HTTP status.
 *
 * Every refusal of the daemon carries `{"error": {"kind", "message"}}`: the
 * error document of a route, or the result document of a job refused before
 * launch (whose `error` has the same shape). Both become a
 * `SkillRunnerError`; `body` keeps the whole decoded answer, so a rejected
 * job's result document stays reachable.
 */
export class SkillRunnerError extends Error {
  /** The HTTP status (4xx or 5xx). */
  readonly status: number;
  /** The daemon's error kind: `bad_job`, `not_found`, `busy`, … (docs/daemon.md). */
  readonly kind: string;
  /** The daemon's one-sentence explanation, saying what to change. */
  readonly detail: string;
  /** The decoded JSON answer, or `undefined` when it was not JSON. */
  readonly body: unknown;
  /** `Retry-After` in seconds, when the daemon sent one (`busy`, `shutting_down`). */
  readonly retryAfter: number | undefined;

  constructor(status: number, kind: string, detail: string, body?: unknown, retryAfter?: number) {
    super(`${status} ${kind}: ${detail}`);
    this.name = "SkillRunnerError";
    this.status = status;
    this.kind = kind;
    this.detail = detail;
    this.body = body;
    this.retryAfter = retryAfter;
  }
}

/** Builds the error of a non-2xx answer, whatever its body looked like. */
export function errorFromAnswer(status: number, raw: Buffer, retryAfter: string | undefined): SkillRunnerError {
  let body: unknown = undefined;
  try {
    body = raw.length > 0 ? JSON.parse(raw.toString("utf8")) : undefined;
  } catch {
    body = undefined;
  }
  let kind = "http_error";
  let detail = raw.toString("utf8").trim() || `the daemon answered HTTP ${status}`;
  if (typeof body === "object" && body !== null) {
    const err = (body as { error?: unknown }).error;
    if (typeof err === "object" && err !== null) {
      const e = err as { kind?: unknown; message?: unknown };
      if (typeof e.kind === "string") kind = e.kind;
      if (typeof e.message === "string") detail = e.message;
    }
  }
  const after = retryAfter === undefined ? undefined : Number(retryAfter);
  return new SkillRunnerError(status, kind, detail, body, after !== undefined && Number.isFinite(after) ? after : undefined);
}
