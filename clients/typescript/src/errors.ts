/**
 * The client's errors: a daemon refusal, with its HTTP status, one class per family.
 *
 * Every refusal of the daemon carries `{"error": {"kind", "message"}}`: the
 * error document of a route, or the result document of a job refused before
 * launch (whose `error` has the same shape). Each becomes a
 * `SkillRunnerError` subclass chosen by its status (`NotFound`, `Busy`, …,
 * the same names as the Python client's), so a caller catches the family it
 * can act on and still reads the daemon's exact `kind`; `body` keeps the
 * whole decoded answer, so a rejected job's result document stays reachable.
 */
export class SkillRunnerError extends Error {
  /** The HTTP status (4xx or 5xx). */
  readonly status: number;
  /** The daemon's error kind: `bad_job`, `not_found`, `busy`, … (docs/daemon.md). */
  readonly kind: string;
  /**
   * The daemon's one-sentence explanation, saying what to change: the
   * `message` of its JSON, and of the Python client. (`String(e)` is
   * `"NAME: message"`; `e.summary` is `"STATUS KIND: message"`.)
   */
  declare readonly message: string;
  /** The decoded JSON answer, or `undefined` when it was not JSON. */
  readonly body: unknown;
  /** `Retry-After` in seconds, when the daemon sent one (`busy`, `shutting_down`). */
  readonly retryAfter: number | undefined;

  constructor(status: number, kind: string, message: string, body?: unknown, retryAfter?: number) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.kind = kind;
    this.body = body;
    this.retryAfter = retryAfter;
  }

  /** `"STATUS KIND: message"`, as the Python client's `str(e)`. */
  get summary(): string {
    return `${this.status} ${this.kind}: ${this.message}`;
  }

  /** @deprecated The same sentence as `message`, its former name here; use `message`. */
  get detail(): string {
    return this.message;
  }
}

/** 400, 405, 408, 413, 415, 422: the request itself must change (`bad_job`, `hash_mismatch`, …). */
export class BadRequest extends SkillRunnerError {}
/** 401 `unauthorized` (no or a wrong token) and 403 `path_not_allowed`. */
export class Unauthorized extends SkillRunnerError {}
/** 404: an unknown execution, session, skill set or route (`not_found`, `not_in_store`). */
export class NotFound extends SkillRunnerError {}
/** 409: `conflict`, `execution_id_in_use`, `not_running`; the state must change first. */
export class Conflict extends SkillRunnerError {}
/** 410 `result_dropped`: the result left retention; the record remains. */
export class Gone extends SkillRunnerError {}
/**
 * 429, or a 5xx with `Retry-After`: try again in `retryAfter` seconds
 * (`busy`, `shutting_down`, `disk_full`, `store_failed`). Nothing was
 * admitted, so the same request may be sent again; `retrying` does that.
 */
export class Busy extends SkillRunnerError {
  declare readonly retryAfter: number;
  constructor(status: number, kind: string, message: string, body?: unknown, retryAfter?: number) {
    super(status, kind, message, body, retryAfter ?? 1);
  }
}
/** Another 5xx: the host failed (`internal`, `staging_failed`, `sandbox_unavailable`); see its log. */
export class ServerError extends SkillRunnerError {}

type ErrorClass = new (status: number, kind: string, message: string, body?: unknown, retryAfter?: number) => SkillRunnerError;

const BY_STATUS: Record<number, ErrorClass> = {
  400: BadRequest,
  405: BadRequest,
  408: BadRequest,
  413: BadRequest,
  415: BadRequest,
  422: BadRequest,
  401: Unauthorized,
  403: Unauthorized,
  404: NotFound,
  409: Conflict,
  410: Gone,
  429: Busy,
};

/** The family of a refusal: by its status; a 5xx with `Retry-After` is `Busy`. */
export function errorClass(status: number, retryAfter: number | undefined): ErrorClass {
  const known = BY_STATUS[status];
  if (known !== undefined) return known;
  if (status >= 500) return retryAfter !== undefined ? Busy : ServerError;
  if (status >= 400) return BadRequest;
  return SkillRunnerError;
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
  let message = raw.toString("utf8").trim() || `the daemon answered HTTP ${status}`;
  if (typeof body === "object" && body !== null) {
    const err = (body as { error?: unknown }).error;
    if (typeof err === "object" && err !== null) {
      const e = err as { kind?: unknown; message?: unknown };
      if (typeof e.kind === "string") kind = e.kind;
      if (typeof e.message === "string") message = e.message;
    }
  }
  const parsed = retryAfter === undefined ? undefined : Number(retryAfter);
  const after = parsed !== undefined && Number.isFinite(parsed) ? Math.max(0, parsed) : undefined;
  return new (errorClass(status, after))(status, kind, message, body, after);
}
