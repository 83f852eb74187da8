/**
 * HTTP/1.1 to the daemon over a Unix socket (`socketPath`) or TCP, with node:http.
 *
 * One connection per request (`agent: false`): nothing is shared between
 * calls, and a stream that is left early takes nothing else down. Over TCP
 * every request carries `Authorization: Bearer <token>`; over the socket
 * only when a token is given (a daemon with a token wants it there too).
 */
import * as http from "node:http";
import * as readline from "node:readline";

import { errorFromAnswer } from "./errors.js";
import type { Event } from "./types.js";

export interface TransportOptions {
  /** The daemon's Unix socket, e.g. `/var/lib/skill-runner/run/skill-runner.sock`. */
  socketPath?: string;
  /** `http://host:port` of a daemon started with `--listen`. */
  url?: string;
  /** The bearer token (required with `url`). */
  token?: string;
  /** Socket inactivity limit in ms; default none (a blocking run lasts as long as its command). */
  timeoutMs?: number;
}

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

export class Transport {
  private readonly where: { socketPath: string } | { host: string; port: number };
  readonly token: string | undefined;
  readonly timeoutMs: number | undefined;

  constructor(options: TransportOptions) {
    const { socketPath, url, token, timeoutMs } = options;
    if ((socketPath === undefined) === (url === undefined)) {
      throw new TypeError("give exactly one of socketPath (a Unix socket) or url (http://host:port)");
    }
    if (url !== undefined) {
      const u = new URL(url);
      if (u.protocol !== "http:" || (u.pathname !== "/" && u.pathname !== "") || u.search !== "") {
        throw new TypeError(`url ${JSON.stringify(url)} is not of the form http://host:port (the daemon speaks plain HTTP)`);
      }
      if (token === undefined) throw new TypeError("a TCP daemon requires a bearer token; give token");
      this.where = { host: u.hostname.replace(/^\[|\]$/g, ""), port: u.port === "" ? 80 : Number(u.port) };
    } else {
      this.where = { socketPath: socketPath as string };
    }
    this.token = token;
    this.timeoutMs = timeoutMs;
  }

  private send(
    method: string,
    path: string,
    body: Buffer | undefined,
    headers: Record<string, string>,
    timeoutMs: number | undefined,
  ): Promise<{ req: http.ClientRequest; res: http.IncomingMessage }> {
    const all: Record<string, string> = { Accept: "application/json", Host: "localhost" };
    if (body !== undefined) {
      all["Content-Type"] = "application/json";
      all["Content-Length"] = String(body.length);
    }
    if (this.token !== undefined) all["Authorization"] = `Bearer ${this.token}`;
    Object.assign(all, headers);
    return new Promise((resolve, reject) => {
      const req = http.request({ ...this.where, method, path, headers: all, agent: false }, (res) =>
        resolve({ req, res }),
      );
      const limit = timeoutMs ?? this.timeoutMs;
      if (limit !== undefined) {
        req.setTimeout(limit, () => req.destroy(new Error(`no answer from the daemon within ${limit} ms (${method} ${path})`)));
      }
      req.on("error", reject);
      req.end(body);
    });
  }

  /** Sends one request and reads the whole answer; any status resolves. */
  async request(
    method: string,
    path: string,
    body?: Buffer,
    headers: Record<string, string> = {},
    timeoutMs?: number,
  ): Promise<Answer> {
    const { res } = await this.send(method, path, body, headers, timeoutMs);
    const chunks: Buffer[] = [];
    for await (const chunk of res) chunks.push(chunk as Buffer);
    return { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) };
  }

  /**
   * Sends one GET whose 200 answer is read by the caller as a stream of
   * bytes; rejects with `SkillRunnerError` on any other status (read whole).
   */
  async open(path: string, timeoutMs?: number): Promise<http.IncomingMessage> {
    const { res } = await this.send("GET", path, undefined, { Accept: "application/octet-stream" }, timeoutMs);
    if (res.statusCode !== 200) {
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      throw errorOf({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
    }
    return res;
  }

  /**
   * Sends one request whose 200 answer is NDJSON; rejects with
   * `SkillRunnerError` on any other (read whole).
   */
  async stream(method: string, path: string, body?: Buffer, timeoutMs?: number): Promise<EventStream> {
    const { req, res } = await this.send(method, path, body, { Accept: "application/x-ndjson" }, timeoutMs);
    if (res.statusCode !== 200) {
      const chunks: Buffer[] = [];
      for await (const chunk of res) chunks.push(chunk as Buffer);
      throw errorOf({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) });
    }
    return new EventStream(req, res);
  }
}

/**
 * The events of a stream, one decoded JSON object a line.
 *
 * `for await (const e of stream)` ends after the `exit` event, when the
 * daemon closes the stream; `close()` leaves early. Leaving a stream of
 * `POST /v1/executions` early disconnects, which cancels that execution
 * (docs/daemon.md, Cancellation); leaving a re-attached stream does not.
 */
export class EventStream implements AsyncIterable<Event> {
  constructor(
    private readonly req: http.ClientRequest,
    private readonly res: http.IncomingMessage,
  ) {}

  async *[Symbol.asyncIterator](): AsyncIterator<Event> {
    const lines = readline.createInterface({ input: this.res, crlfDelay: Infinity });
    try {
      for await (const line of lines) {
        const text = line.trim();
        if (text === "") continue;
        const event: unknown = JSON.parse(text);
        if (typeof event !== "object" || event === null || Array.isArray(event)) {
          throw new Error(`the daemon sent an event that is not a JSON object: ${text.slice(0, 200)}`);
        }
        yield event as Event;
      }
    } finally {
      lines.close();
      this.close();
    }
  }

  /** Closes the connection (idempotent). */
  close(): void {
    this.res.destroy();
    this.req.destroy();
  }
}

/** The `SkillRunnerError` of a non-2xx answer. */
export function errorOf(answer: Answer): Error {
  const after = answer.headers["retry-after"];
  return errorFromAnswer(answer.status, answer.body, Array.isArray(after) ? after[0] : after);
}
