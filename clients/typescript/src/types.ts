/**
 * Shapes of the documents the daemon takes and gives (docs/formats.md).
 *
 * The shapes a client builds (bindings, bundles) are spelled out; the
 * documents the daemon answers with are named as the Python client names
 * them (`Result`, `Progress`, `Output`, `ResultError`, `Event`, `ToolAnswer`,
 * `Session`, `Publication`, `StoredFile`, `Version`) and typed with the keys a
 * caller most often reads, each open to more (`[key: string]: Json |
 * undefined`), because the daemon may add keys in later versions and a client
 * must keep them: every key sent is in the object as sent. Listings and
 * records stay `JsonObject`.
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** A frozen binding: exactly one package. */
export interface Binding {
  id: string;
  revision: number;
  version: string;
  hash: string;
}

export interface BundleFile {
  path: string;
  size: number;
  hash: string;
  content: string;
}

export interface BundleSkill extends Binding {
  files: BundleFile[];
}

export interface Bundle {
  skills: BundleSkill[];
}

/** A job document (docs/formats.md, "The job"); only `argv` is required. */
export interface Job {
  argv: string[];
  execution_id?: string;
  stdin?: string;
  env?: Record<string, string>;
  cwd?: string;
  workspace?: string;
  extensions_dir?: string;
  skills?: Array<Binding & { path?: string }>;
  session?: string;
  network?: "none" | { allow: string[]; private?: boolean };
  profile?: string;
  /** An environment of the runner's store (docs/environments.md). */
  environment?: { id: string; hash: string };
  limits?: Partial<Record<
    "timeout_ms" | "output_bytes" | "memory_bytes" | "pids" | "cpu_ms" | "file_size_bytes" | "tmp_bytes" | "disk_bytes",
    number
  >>;
  /** Files written into the workspace before the command starts (docs/files.md); see `inputFile`. */
  files?: InputFile[];
  /** Relative patterns of workspace files collected when the command ends. */
  outputs?: string[];
}

/** One entry of a job's `files`: `content` in base64, `mode` octal text such as `"0755"`. */
export interface InputFile {
  path: string;
  content: string;
  mode?: string;
}

/**
 * One entry of a result's `outputs` (docs/files.md): `sha256` present means
 * the file was kept (download it with `Client.output` or `saveOutput`);
 * `content` holds its bytes in base64 when small; `truncated` says they are
 * not in the result; `error` says why it was not kept.
 */
export type Output = {
  path: string;
  size: number;
  sha256?: string;
  content?: string;
  truncated?: boolean;
  error?: string;
};

/** The result document of an execution (the keys most read; every key is kept). */
export interface Result extends Record<string, Json | undefined> {
  execution_id: string;
  status: "exited" | "signaled" | "timed_out" | "limit_exceeded" | "cancelled" | "failed" | "rejected";
  exit_code: number | null;
  signal: number | null;
  stdout: string;
  stderr: string;
  error: ResultError | null;
  /** Present when the job named `outputs`. */
  outputs?: Output[];
  /** Said when a bound stopped the listing of outputs. */
  outputs_note?: string;
}

/** A result's `error`: `{kind, message}`, the message one sentence saying what to change. */
export interface ResultError extends JsonObject {
  kind: string;
  message: string;
}

/** A tool call's answer, `{content, is_error}`, ready to hand back to the model. */
export interface ToolAnswer extends Record<string, Json | undefined> {
  content: string;
  is_error: boolean;
}

/** A skill-host session (docs/skill-host.md). */
export interface Session extends Record<string, Json | undefined> {
  id: string;
  delivery: string;
  /** Bindings when created or shown. */
  skills: Json[];
  /** `{skills, text}`: what to put in the model's system prompt. */
  prompt?: JsonObject;
  /** The tool definitions to hand to the model. */
  tools: JsonObject[];
  created_at?: string;
  last_used_at?: string;
}

/** What `POST /v1/skill-packages` answered. */
export interface Publication extends Record<string, Json | undefined> {
  identity: string;
  skills: Array<Binding & JsonObject>;
  new_packages: number;
  warnings: Json[];
}

/** One file written into a session's workspace. */
export interface StoredFile extends Record<string, Json | undefined> {
  session: string;
  path: string;
  size: number;
  sha256: string;
}

/** `GET /v1/version`. */
export interface Version extends Record<string, Json | undefined> {
  name: string;
  version: string;
  api_version: string;
  capabilities: JsonObject;
}

/** `{execution_id, status}` of an execution that has not finished. */
export interface Progress extends JsonObject {
  execution_id: string;
  status: "queued" | "running";
}

/** One NDJSON event of an execution's stream. */
export type Event =
  | { event: "started"; seq?: number; execution_id: string }
  | { event: "stdout" | "stderr"; seq?: number; data: string }
  | { event: "heartbeat"; seq: number }
  | { event: "exit"; seq?: number; result: Result };
