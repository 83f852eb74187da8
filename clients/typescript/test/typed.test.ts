/** Typed answers, the error classes (the Python client's names) and `retrying`, against real daemons. */
import * as assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  BadRequest,
  Busy,
  Client,
  Conflict,
  Gone,
  NotFound,
  type Publication,
  type Result,
  type Session,
  SkillRunnerError,
  type ToolAnswer,
  Unauthorized,
  bindingsOf,
  bundleFolder,
  retrying,
} from "../src/index.js";
import { ServerError, errorFromAnswer } from "../src/errors.js";
import { Daemon, HELLO } from "./daemon.js";

/** The error a promise rejects with; fails when it resolves. */
async function refusal(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  assert.fail("expected the daemon to refuse");
}

describe("typed answers and error classes", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await Daemon.start();
    client = new Client({ socketPath: daemon.socketPath! });
  });
  after(async () => daemon.stop());

  test("a result is typed and keeps every key the daemon sent", async () => {
    const bundle = bundleFolder(HELLO, "hello", 1, "1.0.0");
    const published: Publication = await client.publish(bundle);
    assert.equal(typeof published.identity, "string");
    assert.equal(published.skills[0]!.id, "hello");
    const result: Result = await client.run({
      argv: ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "typed"],
      skills: bindingsOf(bundle),
      files: [{ path: "out.txt", content: "aGk=" }],
      outputs: ["out.txt"],
    });
    assert.deepEqual([result.status, result.exit_code, result.error], ["exited", 0, null]);
    assert.ok(result.stdout.startsWith("Hello, typed!"));
    assert.deepEqual([result.outputs![0]!.path, result.outputs![0]!.size], ["out.txt", 2]);
    // A key no interface names is there as sent.
    assert.equal(typeof (result["identity"] as { uid: number }).uid, "number");
  });

  test("a timed-out result has its typed error", async () => {
    const r = await client.run({ argv: ["sleep", "30"], limits: { timeout_ms: 300 } });
    assert.equal(r.status, "timed_out");
    assert.equal(r.error!.kind, "timed_out");
    assert.equal(typeof r.error!.message, "string");
  });

  test("sessions, tool answers and stored files are typed", async () => {
    const bundle = bundleFolder(HELLO, "hello", 1, "1.0.0");
    await client.publish(bundle);
    const s: Session = await client.createSession(bindingsOf(bundle), ["bash"], { workspace: "managed" });
    assert.equal(s.delivery, "managed_filesystem");
    assert.ok(s.tools.some((t) => t["name"] === "load_skill"));
    const loaded: ToolAnswer = await client.callTool(s.id, "load_skill", { name: "hello" });
    assert.equal(loaded.is_error, false);
    const stored = await client.uploadFile(s.id, "in/data.txt", "abc");
    assert.deepEqual([stored.path, stored.size, stored.sha256.length], ["in/data.txt", 3, 64]);
    const v = await client.version();
    assert.equal(v.name, "skill-runner");
  });

  test("each refusal is its family, with kind, status and the sentence as message", async () => {
    const nf = await refusal(client.execution("ts-no-such-execution"));
    assert.ok(nf instanceof NotFound && nf instanceof SkillRunnerError);
    assert.deepEqual([nf.status, nf.kind, nf.name], [404, "not_found", "NotFound"]);
    assert.equal(nf.summary, `404 not_found: ${nf.message}`);
    const bad = await refusal(client.run({ argv: [] }));
    assert.ok(bad instanceof BadRequest);
    // `message` is the daemon's sentence, as in its JSON and in Python; `detail` is its old name.
    assert.equal(bad.message, (bad.body as { error: { message: string } }).error.message);
    assert.equal(bad.detail, bad.message);
    const done = await client.run({ execution_id: "ts-typed-done", argv: ["true"] });
    const c = await refusal(client.cancel(done.execution_id));
    assert.ok(c instanceof Conflict);
    assert.equal(c.status, 409);
  });

  test("a wrong token is Unauthorized", async () => {
    const token = "ts-typed-token-0123456789";
    const d = await Daemon.start({ tcp: true, token });
    try {
      const e = await refusal(new Client({ url: d.url!, token: "a-wrong-token-0123456789" }).version());
      assert.ok(e instanceof Unauthorized);
      assert.deepEqual([e.status, e.kind], [401, "unauthorized"]);
    } finally {
      await d.stop();
    }
  });

  test("a dropped result is Gone", async () => {
    const d = await Daemon.start({ extra: ["--retain-bytes", "2MiB", "--max-output-bytes", "1MiB"] });
    try {
      const c = new Client({ socketPath: d.socketPath! });
      const big = ["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a"];
      for (const n of [0, 1, 2]) await c.run({ execution_id: `ts-big-${n}`, argv: big, limits: { output_bytes: 1 << 20 } });
      const e = await refusal(c.execution("ts-big-0"));
      assert.ok(e instanceof Gone);
      assert.deepEqual([e.status, e.kind], [410, "result_dropped"]);
    } finally {
      await d.stop();
    }
  });
});

describe("Busy and retrying, on a daemon with one slot and no queue", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await Daemon.start({ extra: ["--max-running", "1", "--max-queued", "0"] });
    client = new Client({ socketPath: daemon.socketPath! });
  });
  after(async () => daemon.stop());

  async function hold(id: string): Promise<void> {
    const held = await client.runDetached({ execution_id: id, argv: ["sleep", "300"] });
    assert.equal(held.status === "queued" || held.status === "running", true);
  }
  async function free(id: string): Promise<void> {
    try {
      await client.cancel(id);
    } catch (e) {
      if (!(e instanceof Conflict)) throw e; // already finished
    }
    assert.equal((await client.wait(id)).status, "cancelled");
  }

  test("Busy carries retryAfter and retrying honours it", async () => {
    await hold("ts-holder-1");
    const e = await refusal(client.run({ argv: ["true"] }));
    assert.ok(e instanceof Busy);
    assert.deepEqual([e.status, e.kind, e.retryAfter], [429, "busy", 1]);
    const waited: number[] = [];
    // The "sleep" frees the slot instead of sleeping: the next attempt is admitted.
    const r = await retrying(() => client.run({ argv: ["echo", "admitted"] }), {
      attempts: 5,
      totalMs: 30_000,
      sleep: async (ms) => {
        waited.push(ms);
        await free("ts-holder-1");
      },
    });
    assert.equal(r.stdout, "admitted\n");
    assert.equal(waited[0], 1000);
  });

  test("retrying stops at its attempts and its total, and retries only Busy", async () => {
    await hold("ts-holder-2");
    try {
      const waited: number[] = [];
      const sleep = async (ms: number) => void waited.push(ms);
      assert.ok((await refusal(retrying(() => client.run({ argv: ["true"] }), { attempts: 3, sleep }))) instanceof Busy);
      assert.deepEqual(waited, [1000, 1000], "three attempts, two waits of Retry-After");
      waited.length = 0;
      assert.ok((await refusal(retrying(() => client.run({ argv: ["true"] }), { attempts: 9, totalMs: 500, sleep }))) instanceof Busy);
      assert.deepEqual(waited, [], "a Retry-After past the total is not waited for");
      let calls = 0;
      const nf = await refusal(retrying(() => (calls++, client.execution("ts-never-was")), { sleep }));
      assert.ok(nf instanceof NotFound);
      assert.equal(calls, 1);
      await assert.rejects(retrying(() => client.version(), { attempts: 0 }), RangeError);
    } finally {
      await free("ts-holder-2");
    }
  });
});

test("the family follows the status and Retry-After, as in Python", () => {
  const body = Buffer.from(JSON.stringify({ error: { kind: "k", message: "m" } }));
  const family = (status: number, retryAfter?: string) => errorFromAnswer(status, body, retryAfter).constructor;
  assert.deepEqual(
    [400, 413, 422, 401, 403, 404, 409, 410, 429].map((s) => family(s)),
    [BadRequest, BadRequest, BadRequest, Unauthorized, Unauthorized, NotFound, Conflict, Gone, Busy],
  );
  assert.equal(family(503, "5"), Busy);
  assert.equal(family(500, "30"), Busy);
  assert.equal(family(503), ServerError);
  const e = errorFromAnswer(429, Buffer.from("too many"), undefined);
  assert.ok(e instanceof Busy);
  assert.deepEqual([e.retryAfter, e.kind, e.message], [1, "http_error", "too many"]);
});
