/**
 * The client: one method per daemon route (docs/daemon.md, docs/skill-host.md).
 *
 * Methods resolve to the daemon's JSON answer (typed as `types.ts` names it)
 * and reject with a `SkillRunnerError` subclass (`NotFound`, `Busy`, …) for
 * every 4xx/5xx answer; connection failures stay Node's own errors. Nothing
 * is cached or retried: a method is one request (`retrying` retries a `Busy`
 * one).
 */
import { bundleBytes, bundleFolder } from "./bundle.js";
import { type Provenance, environmentUpload } from "./environment.js";
import { SkillRunnerError } from "./errors.js";
import { type Answer, type EventStream, Transport, type TransportOptions, errorOf } from "./transport.js";
import { createHash } from "node:crypto";
import { createWriteStream } from "node:fs";
import { mkdir, realpath, rm } from "node:fs/promises";
import * as nodePath from "node:path";

import type {
  Binding,
  Bundle,
  InputFile,
  Job,
  JsonObject,
  Output,
  Progress,
  Publication,
  Result,
  Session,
  StoredFile,
  ToolAnswer,
  Version,
} from "./types.js";

type Body = object | Buffer;

/** The daemon holds a long-poll at most this long (ms); `wait` polls again. */
export const LONG_POLL_MAX_MS = 60_000;
type Query = Record<string, string | number | undefined>;

function encode(body: Body): Buffer {
  return Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body), "utf8");
}

/** One path segment, percent-encoded (`/` included). */
function seg(value: string): string {
  return encodeURIComponent(value);
}

/** A workspace path, percent-encoded segment by segment (`/` kept). */
function filePath(value: string): string {
  return value.split("/").map(encodeURIComponent).join("/");
}

function query(params: Query): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  const text = q.toString();
  return text === "" ? "" : `?${text}`;
}

/** One entry of a job's `files`: `data` base64-encoded, `mode` (e.g. `0o755`) as octal text. */
export function inputFile(path: string, data: Buffer | string, mode?: number): InputFile {
  const entry: InputFile = { path, content: Buffer.from(data).toString("base64") };
  if (mode !== undefined) entry.mode = mode.toString(8).padStart(4, "0");
  return entry;
}

function outputPath(executionId: string, path: string): string {
  return `/v1/executions/${seg(executionId)}/outputs/${path.split("/").map(encodeURIComponent).join("/")}`;
}

/** A session skill: a catalog name or a published binding. */
export type SessionSkill = { name: string } | Binding;

export class Client {
  readonly transport: Transport;

  /**
   * `new Client({socketPath: "/var/lib/skill-runner/run/skill-runner.sock"})`
   * or `new Client({url: "http://127.0.0.1:8787", token})`.
   */
  constructor(options: TransportOptions) {
    this.transport = new Transport(options);
  }

  private async call(method: string, path: string, body?: Body, ok: number[] = [200], timeoutMs?: number): Promise<Answer> {
    const answer = await this.transport.request(method, path, body === undefined ? undefined : encode(body), {}, timeoutMs);
    if (!ok.includes(answer.status)) throw errorOf(answer);
    return answer;
  }

  private async json<T = JsonObject>(method: string, path: string, body?: Body, ok: number[] = [200]): Promise<T> {
    const answer = await this.call(method, path, body, ok);
    const doc: unknown = JSON.parse(answer.body.toString("utf8"));
    if (typeof doc !== "object" || doc === null || Array.isArray(doc)) {
      throw new SkillRunnerError(answer.status, "bad_answer", `${method} ${path} answered with something other than a JSON object`);
    }
    return doc as T;
  }

  // -- service -------------------------------------------------------------

  /** `GET /v1/health`: the health document, also when it is 503 (`status` says why). */
  health(): Promise<JsonObject> {
    return this.json("GET", "/v1/health", undefined, [200, 503]);
  }

  /** `GET /v1/version`: `{name, version, api_version, capabilities}`. */
  version(): Promise<Version> {
    return this.json<Version>("GET", "/v1/version");
  }

  /** `GET /v1/receipt-key`: `{keyid, public_key_pem}`, the key results are signed with. */
  receiptKey(): Promise<JsonObject> {
    return this.json("GET", "/v1/receipt-key");
  }

  /** `GET /v1/openapi.json`: the OpenAPI 3.1 document of every route. */
  openapi(): Promise<JsonObject> {
    return this.json("GET", "/v1/openapi.json");
  }

  /** `GET /metrics`: Prometheus text. */
  async metrics(): Promise<string> {
    return (await this.call("GET", "/metrics")).body.toString("utf8");
  }

  // -- skill packages --------------------------------------------------------

  /** `POST /v1/skill-packages`: publishes a bundle; `{identity, skills, new_packages, warnings}`. */
  publish(bundle: Bundle | Buffer): Promise<Publication> {
    return this.json<Publication>("POST", "/v1/skill-packages", Buffer.isBuffer(bundle) ? bundle : bundleBytes(bundle));
  }

  /** Builds the bundle of one skill folder (`bundleFolder`) and publishes it. */
  publishFolder(folder: string, id: string, revision: number, version: string): Promise<Publication> {
    return this.publish(bundleFolder(folder, id, revision, version));
  }

  /** `GET /v1/skill-packages`: `{skills: [bindings]}`, every published binding. */
  skillPackages(): Promise<JsonObject> {
    return this.json("GET", "/v1/skill-packages");
  }

  /** `GET /v1/skill-packages/{identity}`: `{identity, skills}` of a published selection. */
  skillPackage(identity: string): Promise<JsonObject> {
    return this.json("GET", `/v1/skill-packages/${seg(identity)}`);
  }

  // -- environments ----------------------------------------------------------

  /** `GET /v1/environments`: `{environments: [records]}`. */
  listEnvironments(): Promise<JsonObject> {
    return this.json("GET", "/v1/environments");
  }

  /** `GET /v1/environments/{id}/{hash}`: the record; rejects with 404 when absent. */
  getEnvironment(id: string, hash: string): Promise<JsonObject> {
    return this.json("GET", `/v1/environments/${seg(id)}/${seg(hash)}`);
  }

  /** `POST /v1/environments` with an upload (`environmentUpload`): the record. */
  publishEnvironment(upload: Body): Promise<JsonObject> {
    return this.json("POST", "/v1/environments", upload, [201]);
  }

  /** Uploads the tree at `folder` with its environment hash: the record. */
  publishEnvironmentFolder(folder: string, id: string, provenance: Provenance = {}): Promise<JsonObject> {
    return this.publishEnvironment(environmentUpload(folder, id, provenance));
  }

  /**
   * `POST /v1/environments` with a build from the lock's text (the daemon
   * must run with `--env-builds true`); resolves when the build is done.
   */
  buildEnvironment(id: string, lock: string, interpreter?: string): Promise<JsonObject> {
    return this.json("POST", "/v1/environments", interpreter === undefined ? { id, python: lock } : { id, python: lock, interpreter }, [201]);
  }

  // -- executions ------------------------------------------------------------

  /**
   * `POST /v1/executions`: runs a job and resolves to its result document,
   * whatever the command did; a job refused before launch rejects, with the
   * result document in `SkillRunnerError.body`.
   */
  run(job: Job | Buffer): Promise<Result> {
    return this.json<Result>("POST", "/v1/executions", job);
  }

  /**
   * `POST /v1/executions` as NDJSON: iterate the events, `exit` last. A job
   * refused before launch rejects before any event; closing the stream early
   * cancels the execution.
   */
  stream(job: Job | Buffer): Promise<EventStream> {
    return this.transport.stream("POST", "/v1/executions", encode(job));
  }

  /**
   * `POST /v1/executions?wait=false`: admits the job and resolves at once to
   * `{execution_id, status: queued|running}` (202); a retry of a finished
   * execution with the same job resolves to its result (200). A detached
   * execution is never cancelled by a disconnect.
   */
  runDetached(job: Job | Buffer): Promise<Progress | Result> {
    return this.json<Progress | Result>("POST", "/v1/executions?wait=false", job, [200, 202]);
  }

  /**
   * `GET /v1/executions/{id}[?wait=]`: the result, or `{execution_id, status:
   * queued|running}`. With `waitMs` (the daemon caps it at 60 s) the daemon
   * holds the answer until the execution finishes or the time passes.
   */
  async execution(executionId: string, waitMs?: number): Promise<Result | Progress> {
    let path = `/v1/executions/${seg(executionId)}`;
    let timeoutMs: number | undefined;
    if (waitMs !== undefined) {
      path += `?wait=${Math.max(0, Math.round(waitMs))}ms`;
      if (this.transport.timeoutMs !== undefined) timeoutMs = this.transport.timeoutMs + waitMs;
    }
    const answer = await this.call("GET", path, undefined, [200, 202], timeoutMs);
    return JSON.parse(answer.body.toString("utf8")) as Result | Progress;
  }

  /**
   * Long-polls until the execution has a result and resolves to it; rejects
   * with an `Error` when `timeoutMs` passes first (default: as long as it runs).
   */
  async wait(executionId: string, timeoutMs?: number): Promise<Result> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const step = deadline === undefined ? LONG_POLL_MAX_MS : Math.min(LONG_POLL_MAX_MS, Math.max(0, deadline - Date.now()));
      const doc = await this.execution(executionId, step);
      if (doc.status !== "queued" && doc.status !== "running") return doc as Result;
      if (deadline !== undefined && Date.now() >= deadline) {
        throw new Error(`execution ${JSON.stringify(executionId)} did not finish within ${timeoutMs} ms; it is ${doc.status}`);
      }
    }
  }

  /**
   * `GET /v1/executions/{id}/events[?after=SEQ]`: re-attaches to an
   * execution's events: those recorded (after `after`), then live ones,
   * `heartbeat` events when quiet, `exit` last. Leaving it never cancels.
   */
  events(executionId: string, after?: number): Promise<EventStream> {
    return this.transport.stream("GET", `/v1/executions/${seg(executionId)}/events${query({ after })}`);
  }

  /** `GET /v1/executions`: `{executions, next_cursor}`, newest admitted first. */
  executions(options: { status?: string; limit?: number; cursor?: string } = {}): Promise<JsonObject> {
    return this.json("GET", `/v1/executions${query(options)}`);
  }

  /** `GET /v1/executions/{id}/outputs/{path}`: the bytes of a kept output, whole. */
  async output(executionId: string, path: string): Promise<Buffer> {
    return (await this.call("GET", outputPath(executionId, path))).body;
  }

  /**
   * Streams a kept output into the new file `dest` (never overwritten),
   * checking its SHA-256 against the daemon's `ETag`; a mismatch removes the
   * file and rejects.
   */
  async saveOutput(executionId: string, path: string, dest: string): Promise<Output> {
    const res = await this.transport.open(outputPath(executionId, path));
    const expected = String(res.headers.etag ?? "").replace(/"/g, "");
    const digest = createHash("sha256");
    let size = 0;
    const file = createWriteStream(dest, { flags: "wx" });
    try {
      for await (const chunk of res) {
        const b = chunk as Buffer;
        digest.update(b);
        size += b.length;
        if (!file.write(b)) await new Promise<void>((r) => file.once("drain", () => r()));
      }
    } finally {
      await new Promise<void>((resolve, reject) => file.end((e?: Error | null) => (e ? reject(e) : resolve())));
    }
    const sha256 = digest.digest("hex");
    if (expected !== "" && sha256 !== expected) {
      await rm(dest, { force: true });
      throw new Error(`output ${JSON.stringify(path)} of ${JSON.stringify(executionId)}: the bytes received do not match their SHA-256 ${expected}`);
    }
    return { path, size, sha256 };
  }

  /**
   * Writes every kept output of `result` below `folder` (made if missing) at
   * its path; a path that would leave `folder` is refused.
   */
  async saveOutputs(result: Result, folder: string): Promise<Output[]> {
    await mkdir(folder, { recursive: true });
    const root = await realpath(folder);
    const saved: Output[] = [];
    for (const out of result.outputs ?? []) {
      if (out.sha256 === undefined) continue;
      const parts = out.path.split("/");
      if (out.path.startsWith("/") || parts.some((p) => p === "" || p === "." || p === "..")) {
        throw new Error(`output path ${JSON.stringify(out.path)} would leave ${JSON.stringify(folder)}`);
      }
      const dest = nodePath.join(root, ...parts);
      await mkdir(nodePath.dirname(dest), { recursive: true });
      saved.push(await this.saveOutput(result.execution_id, out.path, dest));
    }
    return saved;
  }

  /** `DELETE /v1/executions/{id}`: `{status: "cancelling"}`; 409 `not_running` once finished. */
  cancel(executionId: string): Promise<JsonObject> {
    return this.json("DELETE", `/v1/executions/${seg(executionId)}`, undefined, [202]);
  }

  // -- sessions (docs/skill-host.md) ------------------------------------------

  /**
   * `POST /v1/sessions`: skills as `{name}` or bindings, and the agent's enabled tools.
   * `{workspace: "managed"}`: the daemon keeps a workspace for the session that every
   * job naming it runs in, one at a time (docs/workspaces.md); move files with
   * `uploadFile`, `downloadFile`, `listFiles` and `deleteFile`. `{environment}`: the
   * environment `{id, hash}` every job of the session runs with.
   */
  createSession(
    skills: SessionSkill[],
    tools: string[],
    options: { workspace?: "managed"; environment?: { id: string; hash: string } } = {},
  ): Promise<Session> {
    const doc: {
      skills: SessionSkill[];
      tools: string[];
      workspace?: "managed";
      environment?: { id: string; hash: string };
    } = { skills, tools };
    if (options.workspace !== undefined) doc.workspace = options.workspace;
    if (options.environment !== undefined) doc.environment = options.environment;
    return this.json<Session>("POST", "/v1/sessions", doc);
  }

  /** `GET /v1/sessions`: `{sessions: [{id, delivery, created_at, last_used_at, skills}]}`, newest first. */
  sessions(): Promise<JsonObject> {
    return this.json("GET", "/v1/sessions");
  }

  /** `GET /v1/sessions/{id}`. */
  session(sessionId: string): Promise<Session> {
    return this.json<Session>("GET", `/v1/sessions/${seg(sessionId)}`);
  }

  /** `DELETE /v1/sessions/{id}`: `{id, deleted: true}`. */
  deleteSession(sessionId: string): Promise<JsonObject> {
    return this.json("DELETE", `/v1/sessions/${seg(sessionId)}`);
  }

  /**
   * `POST /v1/sessions/{id}/tools/{tool}`: the model's tool input, unchanged.
   * Resolves to `{content, is_error}`, ready to hand back to the model; a
   * fault the model can fix is `is_error: true`, not a rejection.
   */
  callTool(sessionId: string, tool: string, input: object): Promise<ToolAnswer> {
    return this.json<ToolAnswer>("POST", `/v1/sessions/${seg(sessionId)}/tools/${seg(tool)}`, input);
  }

  /** `GET /v1/sessions/{id}/skills`: list, or find with `query` (tools `list_skills`, `find_skills`). */
  sessionSkills(sessionId: string, options: { query?: string; limit?: number; category?: string } = {}): Promise<JsonObject> {
    return this.json("GET", `/v1/sessions/${seg(sessionId)}/skills${query(options)}`);
  }

  /** `GET /v1/sessions/{id}/skills/{name}`: the body and sections (tools `Skill`, `load_skill`). */
  loadSkill(sessionId: string, name: string): Promise<JsonObject> {
    return this.json("GET", `/v1/sessions/${seg(sessionId)}/skills/${seg(name)}`);
  }

  /** `GET /v1/sessions/{id}/skills/{name}/sections/{section}` (tool `load_skill_section`). */
  skillSection(sessionId: string, name: string, section: string, range: { offset?: number; limit?: number } = {}): Promise<JsonObject> {
    return this.json("GET", `/v1/sessions/${seg(sessionId)}/skills/${seg(name)}/sections/${seg(section)}${query(range)}`);
  }

  /** `GET /v1/sessions/{id}/resources?path=` (tool `read_skill_resource`). */
  sessionResource(sessionId: string, path: string, range: { offset?: number; limit?: number } = {}): Promise<JsonObject> {
    return this.json("GET", `/v1/sessions/${seg(sessionId)}/resources${query({ path, ...range })}`);
  }

  /** `GET /v1/sessions/{id}/events`: the session's activation log. */
  sessionEvents(sessionId: string): Promise<JsonObject> {
    return this.json("GET", `/v1/sessions/${seg(sessionId)}/events`);
  }

  // -- managed session workspaces (docs/workspaces.md) -----------------------

  /**
   * `PUT /v1/sessions/{id}/files/{path}`: writes one file atomically; `{session, path, size, sha256}`.
   * Refused (409 `conflict`) while a job of the session is admitted; 413 past the
   * daemon's `file_body_limit` or `workspace_bytes`.
   */
  async uploadFile(sessionId: string, path: string, data: Buffer | Uint8Array | string): Promise<StoredFile> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    const answer = await this.transport.request("PUT", `/v1/sessions/${seg(sessionId)}/files/${filePath(path)}`, bytes, {
      "Content-Type": "application/octet-stream",
    });
    if (answer.status !== 200) throw errorOf(answer);
    return JSON.parse(answer.body.toString("utf8")) as StoredFile;
  }

  /** `GET /v1/sessions/{id}/files/{path}`: the bytes of one regular file of the workspace. */
  async downloadFile(sessionId: string, path: string): Promise<Buffer> {
    return (await this.call("GET", `/v1/sessions/${seg(sessionId)}/files/${filePath(path)}`)).body;
  }

  /** `GET /v1/sessions/{id}/files?prefix=`: `{files: [{path, size}], truncated}`, by path. */
  listFiles(sessionId: string, prefix?: string): Promise<JsonObject> {
    return this.json("GET", `/v1/sessions/${seg(sessionId)}/files${query({ prefix })}`);
  }

  /** `DELETE /v1/sessions/{id}/files/{path}`: `{session, path, deleted: true}`. */
  deleteFile(sessionId: string, path: string): Promise<JsonObject> {
    return this.json("DELETE", `/v1/sessions/${seg(sessionId)}/files/${filePath(path)}`);
  }

  /**
   * `POST /v1/executions?session_wait=false`: as `run`, but a job whose session's
   * managed workspace is in use is refused (409 `conflict`) rather than queued.
   */
  runIfIdle(job: Job | Buffer): Promise<Result> {
    return this.json<Result>("POST", "/v1/executions?session_wait=false", job);
  }
}
