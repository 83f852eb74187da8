/** Detached runs, long-polls, re-attach, retry, listings, tool calls, version. */
import * as assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client, type Event, type EventStream, SkillRunnerError, bindingsOf, bundleFolder } from "../src/index.js";
import { Daemon, HELLO } from "./daemon.js";

async function refusal(p: Promise<unknown>): Promise<SkillRunnerError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof SkillRunnerError) return e;
    throw e;
  }
  assert.fail("expected the daemon to refuse");
}

async function all(stream: EventStream): Promise<Event[]> {
  const events: Event[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

/** Events up to and including the first of `kind`; leaves the stream. */
async function takeUntil(stream: EventStream, kind: string): Promise<Event[]> {
  const taken: Event[] = [];
  for await (const e of stream) {
    taken.push(e);
    if (e.event === kind) return taken;
  }
  assert.fail(`the stream ended without a ${kind} event`);
}

const seqOf = (e: Event): number => (e as { seq: number }).seq;

describe("orchestration routes", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    // A short heartbeat, so that a quiet stream shows one soon.
    daemon = await Daemon.start({ extra: ["--heartbeat", "100ms"] });
    client = new Client({ socketPath: daemon.socketPath as string });
  });
  after(async () => daemon.stop());

  test("a detached run, then wait, gives the result", async () => {
    const started = await client.runDetached({ execution_id: "ts-detached", argv: ["sh", "-c", "echo a; sleep 1; echo b"] });
    assert.equal(started.execution_id, "ts-detached");
    assert.ok(started.status === "queued" || started.status === "running");
    const result = await client.wait("ts-detached");
    assert.deepEqual([result.status, result.stdout], ["exited", "a\nb\n"]);
    assert.deepEqual(await client.execution("ts-detached", 30_000), result);
  });

  test("a long-poll that times out answers the status", async () => {
    await client.runDetached({ execution_id: "ts-poll", argv: ["sleep", "300"] });
    assert.ok(["queued", "running"].includes((await client.execution("ts-poll", 200)).status));
    await assert.rejects(client.wait("ts-poll", 300), /did not finish within 300 ms/);
    await client.cancel("ts-poll");
    assert.equal((await client.wait("ts-poll")).status, "cancelled");
  });

  test("events replay in seq order and resume after a seq", async () => {
    const result = await client.run({ execution_id: "ts-replay", argv: ["sh", "-c", "echo one; echo two >&2"] });
    const events = await all(await client.events("ts-replay"));
    const seqs = events.map(seqOf);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
    assert.equal(new Set(seqs).size, seqs.length);
    const last = events[events.length - 1];
    assert.equal(events[0]?.event, "started");
    assert.ok(last?.event === "exit");
    assert.deepEqual(last.result, result);
    assert.deepEqual(await all(await client.events("ts-replay", seqOf(events[0] as Event))), events.slice(1));
  });

  test("a re-attached reader sees heartbeats and never cancels", async () => {
    await client.runDetached({ execution_id: "ts-quiet", argv: ["sh", "-c", "echo hi; sleep 300"] });
    const seen = await takeUntil(await client.events("ts-quiet"), "heartbeat");
    assert.ok(seen.some((e) => e.event === "started"));
    const beat = seen[seen.length - 1] as Event;
    assert.equal(seqOf(beat), Math.max(...seen.slice(0, -1).map(seqOf)));
    assert.equal((await client.execution("ts-quiet")).status, "running");
    await client.cancel("ts-quiet");
    const tail = (await all(await client.events("ts-quiet", seqOf(beat)))).filter((e) => e.event !== "heartbeat");
    const last = tail[tail.length - 1];
    assert.ok(last?.event === "exit");
    assert.equal(last.result.status, "cancelled");
  });

  test("a retry with the same job gets the same execution", async () => {
    const job = { execution_id: "ts-retry", argv: ["sh", "-c", "echo once"] };
    const first = await client.run(job);
    assert.deepEqual(await client.run({ ...job }), first);
    assert.deepEqual(await client.runDetached(job), first);
    const replayed = await all(await client.stream(job));
    const last = replayed[replayed.length - 1];
    assert.equal(replayed[0]?.event, "started");
    assert.ok(last?.event === "exit");
    assert.deepEqual(last.result, first);
    const e = await refusal(client.run({ execution_id: "ts-retry", argv: ["sh", "-c", "echo other"] }));
    assert.deepEqual([e.status, e.kind], [409, "execution_id_in_use"]);
  });

  test("executions are listed newest first and paged", async () => {
    for (const n of [0, 1, 2]) await client.run({ execution_id: `ts-list-${n}`, argv: ["true"] });
    const page = await client.executions({ status: "exited", limit: 2 });
    const ids = (page.executions as Array<{ execution_id: string }>).map((e) => e.execution_id);
    assert.deepEqual(ids, ["ts-list-2", "ts-list-1"]);
    assert.equal(typeof page.next_cursor, "string");
    const rest = await client.executions({ status: "exited", limit: 1000, cursor: page.next_cursor as string });
    assert.equal((rest.executions as Array<{ execution_id: string }>)[0]?.execution_id, "ts-list-0");
    const e = await refusal(client.executions({ status: "no-such-status" }));
    assert.deepEqual([e.status, e.kind], [400, "bad_request"]);
  });

  test("published bindings are listed", async () => {
    const bundle = bundleFolder(HELLO, "hello", 1, "1.0.0");
    await client.publish(bundle);
    const [b] = bindingsOf(bundle);
    const listed = (await client.skillPackages()).skills as Array<{ id: string; revision: number; version: string; hash: string }>;
    assert.ok(listed.some((l) => l.id === b?.id && l.revision === b.revision && l.version === b.version && l.hash === b.hash));
  });

  test("sessions are listed and deleted; tools are called", async () => {
    const bundle = bundleFolder(HELLO, "hello", 1, "1.0.0");
    await client.publish(bundle);
    const sid = (await client.createSession(bindingsOf(bundle), ["bash"])).id as string;
    assert.ok(((await client.sessions()).sessions as Array<{ id: string }>).some((s) => s.id === sid));

    const loaded = await client.callTool(sid, "load_skill", { name: "hello" });
    assert.equal(loaded.is_error, false);
    assert.match(loaded.content, /# Hello/);
    const wrong = await client.callTool(sid, "load_skill", { name: "no-such-skill" });
    assert.equal(wrong.is_error, true);
    assert.notEqual(wrong.content, "");
    const e = await refusal(client.callTool(sid, "Skill", { skill: "hello" })); // managed_filesystem has no Skill tool
    assert.deepEqual([e.status, e.kind], [404, "not_found"]);

    assert.deepEqual(await client.deleteSession(sid), { id: sid, deleted: true });
    assert.equal((await refusal(client.session(sid))).status, 404);
  });

  test("version and openapi", async () => {
    const v = await client.version();
    assert.deepEqual([v.name, v.api_version], ["skill-runner", "1"]);
    assert.ok(((v.capabilities as { sandbox_kinds: string[] }).sandbox_kinds).includes("bubblewrap"));
    const doc = await client.openapi();
    assert.match(doc.openapi as string, /^3\.1/);
    assert.ok("/v1/executions/{id}/events" in (doc.paths as object));
  });
});
