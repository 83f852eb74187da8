/** Every client method against a real daemon running real sandboxes. */
import * as assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { type Binding, Client, type Event, type Result, SkillRunnerError, bindingsOf, bundleBytes, bundleFolder, setIdentity } from "../src/index.js";
import { Daemon, HELLO, PATIENCE_MS } from "./daemon.js";

const GREET = ["sh", "$SCIENCEDISCOVERY_SKILLS_DIR/hello/scripts/greet.sh", "client"];

/** Resolves to the error a promise rejects with; fails when it resolves. */
async function refusal(p: Promise<unknown>): Promise<SkillRunnerError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof SkillRunnerError) return e;
    throw e;
  }
  assert.fail("expected the daemon to refuse");
}

async function waitUntil(what: string, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + PATIENCE_MS;
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `${what} did not happen`);
    await sleep(50);
  }
}

async function status(client: Client, id: string): Promise<string | undefined> {
  try {
    return (await client.execution(id)).status;
  } catch (e) {
    if (e instanceof SkillRunnerError && e.status === 404) return undefined; // not admitted yet
    throw e;
  }
}

describe("a daemon on a Unix socket", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await Daemon.start();
    client = new Client({ socketPath: daemon.socketPath as string });
  });
  after(async () => daemon.stop());

  async function publishHello(): Promise<Binding[]> {
    const bundle = bundleFolder(HELLO, "hello", 1, "1.0.0");
    const answer = await client.publish(bundle);
    assert.equal(answer.identity, setIdentity(bindingsOf(bundle)));
    return bindingsOf(bundle);
  }

  test("health says ok", async () => {
    const h = await client.health();
    assert.equal(h.status, "ok");
  });

  test("publish, then the selection is held, and publishing again adds nothing", async () => {
    const bindings = await publishHello();
    const held = await client.skillPackage(setIdentity(bindings));
    assert.deepEqual(held.skills, [{ hash: bindings[0]?.hash, id: "hello", revision: 1, version: "1.0.0" }]);
    assert.equal((await client.publishFolder(HELLO, "hello", 1, "1.0.0")).new_packages, 0);
  });

  test("an unknown selection is not_found", async () => {
    const e = await refusal(client.skillPackage("0".repeat(64)));
    assert.deepEqual([e.status, e.kind], [404, "not_found"]);
  });

  test("tampered bytes are a hash_mismatch", async () => {
    const bundle = bundleFolder(HELLO, "hello-tampered", 1, "1.0.0");
    (bundle.skills[0] as { hash: string }).hash = "0".repeat(64);
    const e = await refusal(client.publish(bundleBytes(bundle)));
    assert.deepEqual([e.status, e.kind], [422, "hash_mismatch"]);
  });

  test("run returns the result with the pinned identity", async () => {
    const bindings = await publishHello();
    const result = await client.run({ argv: GREET, skills: bindings });
    assert.equal(result.status, "exited");
    assert.equal(result.exit_code, 0);
    assert.match(result.stdout, /^Hello, client! \(from the hello skill/);
    assert.equal((result.skills as { identity: string }).identity, setIdentity(bindings));
    assert.deepEqual(await client.execution(result.execution_id), result);
  });

  test("a failing command is a result, not an error", async () => {
    const r = await client.run({ argv: ["sh", "-c", "echo oops >&2; exit 3"] });
    assert.deepEqual([r.status, r.exit_code, r.stderr], ["exited", 3, "oops\n"]);
  });

  test("a bad job rejects with bad_job", async () => {
    const e = await refusal(client.run({ argv: [] }));
    assert.deepEqual([e.status, e.kind], [400, "bad_job"]);
    assert.match(e.detail, /argv/);
  });

  test("a refused job keeps its result document", async () => {
    const missing = { id: "never-published", revision: 1, version: "1", hash: "a".repeat(64) };
    const e = await refusal(client.run({ argv: ["true"], skills: [missing] }));
    assert.deepEqual([e.status, e.kind], [404, "not_in_store"]);
    assert.equal((e.body as Result).status, "rejected");
  });

  test("stream yields started, the output, then exit", async () => {
    const events: Event[] = [];
    for await (const e of await client.stream({ argv: ["sh", "-c", "echo one; echo err >&2; echo two"] })) events.push(e);
    const first = events[0];
    const last = events[events.length - 1];
    assert.ok(first?.event === "started" && last?.event === "exit");
    assert.equal(last.result.execution_id, first.execution_id);
    const text = (kind: string) => events.map((e) => (e.event === kind && "data" in e ? e.data : "")).join("");
    assert.deepEqual([text("stdout"), text("stderr")], [last.result.stdout, last.result.stderr]);
    assert.deepEqual([text("stdout"), text("stderr")], ["one\ntwo\n", "err\n"]);
  });

  test("a refused stream rejects before any event", async () => {
    const e = await refusal(client.stream({ argv: ["true"], limits: { timeout_ms: 0 } }));
    assert.deepEqual([e.status, e.kind], [400, "bad_job"]);
  });

  test("cancel ends a sleeping command", async () => {
    const running = client.run({ execution_id: "ts-sleeper", argv: ["sleep", "300"] });
    await waitUntil("ts-sleeper running", async () => (await status(client, "ts-sleeper")) === "running");
    assert.equal((await client.cancel("ts-sleeper")).status, "cancelling");
    const result = await running;
    assert.equal(result.status, "cancelled");
    assert.equal(result.error?.kind, "cancelled");
    const e = await refusal(client.cancel("ts-sleeper"));
    assert.deepEqual([e.status, e.kind], [409, "not_running"]);
  });

  test("closing a stream cancels its execution", async () => {
    const stream = await client.stream({ execution_id: "ts-left", argv: ["sleep", "300"] });
    for await (const e of stream) {
      assert.equal(e.event, "started");
      break; // leaving the loop closes the stream
    }
    await waitUntil("ts-left cancelled", async () => (await status(client, "ts-left")) === "cancelled");
  });

  test("an unknown execution is not_found", async () => {
    const e = await refusal(client.execution("no-such-execution"));
    assert.deepEqual([e.status, e.kind], [404, "not_found"]);
  });

  test("session routes serve the frozen skill", async () => {
    const bindings = await publishHello();
    const s = await client.createSession(bindings, ["bash", "read"]);
    const sid = s.id as string;
    assert.match(sid, /^ses-[0-9a-f]{32}$/);
    assert.equal(s.delivery, "managed_filesystem");
    assert.equal(s.identity, setIdentity(bindings));
    assert.equal((await client.session(sid)).id, sid);
    const listed = (await client.sessionSkills(sid)).hits as Array<{ name: string }>;
    assert.deepEqual(listed.map((h) => h.name), ["hello"]);
    assert.equal((await client.sessionSkills(sid, { query: "greet", limit: 1 })).total, 1);
    assert.match((await client.loadSkill(sid, "hello")).body as string, /^# Hello/);
    assert.match((await client.skillSection(sid, "hello", "references/template.txt")).content as string, /^Hello, %s!/);
    const part = await client.sessionResource(sid, "/skills/hello/references/template.txt", { offset: 0, limit: 5 });
    assert.deepEqual([part.content, part.truncated, part.next_offset], ["Hello", true, 5]);
    const kinds = ((await client.sessionEvents(sid)).events as Array<{ kind: string }>).map((e) => e.kind);
    assert.equal(kinds.length, 3);
    assert.equal(kinds[0], "load_skill");
    const r = await client.run({ argv: GREET, session: sid });
    assert.equal((r.skills as { identity: string }).identity, s.identity);
    assert.match(r.stdout, /^Hello, client!/);
  });

  test("a skill with files needs a file tool", async () => {
    const bindings = await publishHello();
    const e = await refusal(client.createSession(bindings, ["web_search"]));
    assert.deepEqual([e.status, e.kind], [422, "composition_rejected"]);
  });

  test("metrics count executions", async () => {
    assert.match(await client.metrics(), /skill_runner_executions_total/);
  });
});

describe("a daemon on TCP", () => {
  const token = "client-test-token-0123456789";
  let daemon: Daemon;
  before(async () => {
    daemon = await Daemon.start({ tcp: true, token });
  });
  after(async () => daemon.stop());

  test("runs with the bearer token and refuses a wrong one", async () => {
    const good = new Client({ url: daemon.url as string, token });
    assert.equal((await good.run({ argv: ["echo", "over tcp"] })).stdout, "over tcp\n");
    const bad = new Client({ url: daemon.url as string, token: "wrong-token-0123456789" });
    assert.equal((await bad.health()).status, "ok"); // health never needs the token
    const e = await refusal(bad.run({ argv: ["true"] }));
    assert.deepEqual([e.status, e.kind], [401, "unauthorized"]);
  });

  test("a TCP client without a token is refused at once", () => {
    assert.throws(() => new Client({ url: "http://127.0.0.1:1" }), /bearer token/);
  });
});
