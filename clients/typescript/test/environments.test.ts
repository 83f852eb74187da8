/** Environment uploads and records against a real daemon, and the client's environment hash against the vectors of docs/formats.md. */
import * as assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { Client, SkillRunnerError, type TreeEntry, environmentHash, environmentUpload } from "../src/index.js";
import { Daemon } from "./daemon.js";

const VECTORS = fileURLToPath(new URL("../../../../runner/tests/vectors/environment-hash.json", import.meta.url));
const SIX = "six==1.17.0 \\\n    --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274\n";

async function refusal(p: Promise<unknown>): Promise<SkillRunnerError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof SkillRunnerError) return e;
    throw e;
  }
  assert.fail("expected the daemon to refuse");
}

interface VectorEntry {
  path: string;
  kind: string;
  exec?: boolean;
  content_base64?: string;
  target?: string;
}

test("the environment hash matches the published vectors", () => {
  const cases = (JSON.parse(readFileSync(VECTORS, "utf8")) as { cases: { name: string; entries: VectorEntry[]; hash: string }[] }).cases;
  assert.ok(cases.length > 0);
  for (const c of cases) {
    const entries: TreeEntry[] = c.entries.map((e) =>
      e.kind === "file"
        ? { path: e.path, kind: "file", bytes: Buffer.from(e.content_base64 ?? "", "base64"), executable: e.exec === true }
        : { path: e.path, kind: "symlink", target: e.target ?? "" },
    );
    assert.equal(environmentHash(entries), c.hash, c.name);
  }
});

describe("environments on a daemon", () => {
  let daemon: Daemon;
  let client: Client;
  let dir: string;
  before(async () => {
    daemon = await Daemon.start();
    client = new Client({ socketPath: daemon.socketPath as string });
    dir = mkdtempSync(join(tmpdir(), "sr-env-"));
  });
  after(async () => {
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test("an uploaded folder is published, listed, answered and imported by a job", async () => {
    const tree = join(dir, "tree");
    mkdirSync(join(tree, "python"), { recursive: true });
    mkdirSync(join(tree, "bin"));
    writeFileSync(join(tree, "python", "ts_env.py"), "NAME = 'from the typescript client'\n");
    symlinkSync("../python/ts_env.py", join(tree, "bin", "ts-env"));
    const record = await client.publishEnvironmentFolder(tree, "ts-env", { python: SIX });
    assert.equal(record.id, "ts-env");
    assert.equal(record.hash, environmentUpload(tree, "ts-env").hash);
    assert.deepEqual(await client.getEnvironment("ts-env", record.hash as string), record);
    assert.deepEqual((await client.listEnvironments()).environments, [record]);
    const result = await client.run({
      argv: ["python3", "-c", "import ts_env; print(ts_env.NAME)"],
      environment: { id: "ts-env", hash: record.hash as string },
    });
    assert.equal(result.stdout, "from the typescript client\n");
    const lying = { ...environmentUpload(tree, "ts-env"), hash: "0".repeat(64) };
    const e = await refusal(client.publishEnvironment(lying));
    assert.deepEqual([e.status, e.kind], [422, "hash_mismatch"]);
    assert.equal((await refusal(client.getEnvironment("ts-env", "1".repeat(64)))).status, 404);
  });

  test("a build is refused where builds are off", async () => {
    const e = await refusal(client.buildEnvironment("six-env", SIX));
    assert.equal(e.status, 400);
    assert.match(e.message, /--env-builds true/);
  });
});
