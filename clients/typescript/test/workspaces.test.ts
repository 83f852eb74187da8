/**
 * A managed session workspace through the client alone: upload a CSV, run a
 * skill's script on it, run a second command on its output, download the
 * result; refusals reject with the daemon's sentence.
 */
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, SkillRunnerError, bindingsOf, bundleFolder } from "../src/index.js";
import { Daemon } from "./daemon.js";

const SUM = `set -e
in=$1; out=$2
mkdir -p "$(dirname "$out")"
sum=$(tail -n +2 "$in" | awk -F, '{s+=$2} END {print s}')
printf 'sum: %s\\n' "$sum" > "$out"
`;

async function refusal(p: Promise<unknown>): Promise<SkillRunnerError> {
  try {
    await p;
  } catch (e) {
    if (e instanceof SkillRunnerError) return e;
    throw e;
  }
  assert.fail("expected the daemon to refuse");
}

describe("managed session workspaces", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await Daemon.start();
    client = new Client({ socketPath: daemon.socketPath as string });
  });
  after(async () => daemon.stop());

  test("upload, run twice, download", async () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "sr-ts-ws-"));
    const skill = path.join(tmp, "csv-sum");
    fs.mkdirSync(path.join(skill, "scripts"), { recursive: true });
    fs.writeFileSync(path.join(skill, "SKILL.md"), "---\nname: csv-sum\ndescription: Sum a CSV column.\n---\n# csv-sum\n");
    fs.writeFileSync(path.join(skill, "scripts", "sum.sh"), SUM);
    const bundle = bundleFolder(skill, "csv-sum", 1, "1.0.0");
    fs.rmSync(tmp, { recursive: true, force: true });
    await client.publish(bundle);
    const session = await client.createSession(bindingsOf(bundle), ["bash"], { workspace: "managed" });
    assert.equal(session.workspace, "managed");
    const sid = session.id as string;

    const written = await client.uploadFile(sid, "in/data.csv", "name,amount\na,3\nb,4\n");
    assert.deepEqual([written.path, written.size], ["in/data.csv", 20]);
    const first = await client.run({ session: sid, argv: ["sh", "/skills/csv-sum/scripts/sum.sh", "in/data.csv", "out/sum.txt"] });
    assert.equal(first.exit_code, 0, JSON.stringify(first));
    const second = await client.run({ session: sid, argv: ["sh", "-c", "tr a-z A-Z < out/sum.txt > out/SUM.txt"] });
    assert.equal(second.exit_code, 0, JSON.stringify(second));
    assert.equal((await client.downloadFile(sid, "out/SUM.txt")).toString("utf8"), "SUM: 7\n");
    const listed = await client.listFiles(sid, "out/");
    assert.deepEqual(
      (listed.files as { path: string }[]).map((f) => f.path),
      ["out/SUM.txt", "out/sum.txt"],
    );
    assert.equal((await client.deleteFile(sid, "out/SUM.txt")).deleted, true);
    assert.equal((await refusal(client.downloadFile(sid, "out/SUM.txt"))).status, 404);
    await client.deleteSession(sid);
  });

  test("refusals say what to change", async () => {
    const sid = (await client.createSession([], [], { workspace: "managed" })).id as string;
    const e = await refusal(client.uploadFile(sid, "../escape", "x"));
    assert.equal(e.status, 400);
    assert.match(e.message, /admissible/);
    await client.run({ session: sid, argv: ["sh", "-c", "ln -s /etc/passwd link; mkfifo pipe"] });
    for (const [p, says] of [["link", /symlink/], ["pipe", /FIFO/]] as const) {
      const r = await refusal(client.downloadFile(sid, p));
      assert.equal(r.status, 409);
      assert.match(r.message, says);
    }
    const plain = (await client.createSession([], [])).id as string;
    assert.equal((await refusal(client.listFiles(plain))).status, 404);
    await client.deleteSession(sid);
  });
});
