/** Files in and out of an execution through the daemon alone (docs/files.md). */
import * as assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, type Result, SkillRunnerError, inputFile } from "../src/index.js";
import { Daemon } from "./daemon.js";

describe("files in and outputs out", () => {
  let daemon: Daemon;
  let client: Client;
  let scratch: string;
  before(async () => {
    daemon = await Daemon.start();
    client = new Client({ socketPath: daemon.socketPath as string });
    scratch = await mkdtemp(path.join(tmpdir(), "sr-ts-files-"));
  });
  after(async () => {
    await daemon.stop();
    await rm(scratch, { recursive: true, force: true });
  });

  test("files go in and kept outputs come back, streamed and checked", async () => {
    const big = Buffer.alloc(256 * 1024, 7);
    const result = (await client.run({
      argv: ["sh", "-c", "mkdir out && sort in.csv > out/sorted.csv && cat big.bin > out/big.bin"],
      files: [inputFile("in.csv", "b\na\n"), inputFile("big.bin", big, 0o600)],
      outputs: ["out/*"],
    })) as Result;
    assert.equal(result.exit_code, 0, JSON.stringify(result));
    const byPath = new Map((result.outputs ?? []).map((o) => [o.path, o]));
    assert.equal(Buffer.from(byPath.get("out/sorted.csv")?.content ?? "", "base64").toString(), "a\nb\n");
    assert.equal(byPath.get("out/big.bin")?.truncated, true);
    assert.equal(byPath.get("out/big.bin")?.sha256, createHash("sha256").update(big).digest("hex"));
    assert.deepEqual(await client.output(result.execution_id, "out/big.bin"), big);
    const saved = await client.saveOutputs(result, path.join(scratch, "got"));
    assert.deepEqual(saved.map((s) => s.path).sort(), ["out/big.bin", "out/sorted.csv"]);
    assert.deepEqual(await readFile(path.join(scratch, "got", "out", "big.bin")), big);
    try {
      await client.output(result.execution_id, "in.csv");
      assert.fail("a path not kept was served");
    } catch (e) {
      assert.ok(e instanceof SkillRunnerError && e.status === 404, String(e));
    }
  });

  test("a path that would leave the folder is refused by the client", async () => {
    const forged = { execution_id: "x", outputs: [{ path: "../escape", size: 1, sha256: "0".repeat(64) }] } as unknown as Result;
    await assert.rejects(client.saveOutputs(forged, path.join(scratch, "forged")));
  });
});
