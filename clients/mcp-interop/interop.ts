// The official MCP TypeScript SDK (npm `@modelcontextprotocol/sdk`) as a
// client of skill-runner's MCP server, over stdio (it spawns
// `skill-runner mcp --session ID`) or Streamable HTTP (a running daemon's
// /v1/sessions/{id}/mcp). The same checks as interop.py: initialise, list
// tools, find_skills, run (the skill's script in the sandbox), read
// skill://tooly/SKILL.md, skills/list digests against the bytes, and a
// cancelled run whose process tree is gone. Exits non-zero with a sentence
// on the first broken promise.
//
//   tsx interop.ts stdio BINARY SESSION SKILL_DIR [ENV=VALUE...]
//   tsx interop.ts http URL TOKEN SKILL_DIR

import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { z } from "zod";

const SKILL = "tooly";

function check(ok: boolean, message: string): void {
  if (!ok) {
    console.error(`interop (typescript): ${message}`);
    process.exit(1);
  }
}

type Block = { type: string; text?: string };
const textOf = (r: { content?: unknown }): string =>
  ((r.content ?? []) as Block[]).map((c) => (c.type === "text" ? (c.text ?? "") : "")).join("");

function stat(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
}

function pids(): number[] {
  return readdirSync("/proc")
    .filter((e) => /^\d+$/.test(e))
    .map(Number);
}

function tree(root: number): number[] {
  const found = [root];
  for (let i = 0; i < found.length; i++) {
    for (const pid of pids()) {
      const s = stat(pid);
      if (!s || found.includes(pid)) continue;
      const ppid = Number(s.slice(s.lastIndexOf(") ") + 2).split(" ")[1]);
      if (ppid === found[i]) found.push(pid);
    }
  }
  return found;
}

function find(marker: string): number | undefined {
  return pids().find((pid) => {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      return cmdline.includes(marker) && !cmdline.includes("interop");
    } catch {
      return false;
    }
  });
}

function alive(pid: number): boolean {
  const s = stat(pid);
  return s !== undefined && !s.slice(s.lastIndexOf(") ") + 2).startsWith("Z");
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function cancelledRun(client: Client): Promise<void> {
  const marker = `ts-cancel-${process.pid}-${Date.now()}`;
  const abort = new AbortController();
  let started!: () => void;
  const output = new Promise<void>((r) => (started = r));
  const call = client
    .callTool(
      { name: "run", arguments: { argv: ["sh", "-c", `echo started; sleep 1000; echo ${marker}`] } },
      undefined,
      { signal: abort.signal, onprogress: () => started(), timeout: 120_000 },
    )
    .catch(() => undefined);
  await output;
  const shell = find(marker);
  check(shell !== undefined, "the run's shell is not running after its output arrived");
  const all = tree(shell!);
  abort.abort("the user stopped it");
  await call;
  const deadline = Date.now() + 60_000;
  while (all.some(alive)) {
    check(Date.now() < deadline, `processes ${all} outlived the cancelled run`);
    await sleep(50);
  }
  check(find(marker) === undefined, "a process of the cancelled run is left");
}

async function main(): Promise<void> {
  const [mode, a, b, skillDir, ...env] = process.argv.slice(2);
  const transport =
    mode === "stdio"
      ? new StdioClientTransport({
          command: a,
          args: ["mcp", "--session", b],
          env: {
            ...(process.env as Record<string, string>),
            ...Object.fromEntries(env.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)])),
          },
        })
      : new StreamableHTTPClientTransport(new URL(a), {
          requestInit: { headers: { Authorization: `Bearer ${b}` } },
        });
  const client = new Client({ name: "skill-runner-interop", version: "1" });
  await client.connect(transport);

  const caps = client.getServerCapabilities() as { extensions?: Record<string, unknown> } | undefined;
  check(!!caps?.extensions?.["io.modelcontextprotocol/skills"], `no Skills extension declared: ${JSON.stringify(caps)}`);

  const names = (await client.listTools()).tools.map((t) => t.name);
  check(names.includes("find_skills") && names.includes("run"), `tools are ${names}`);

  const found = await client.callTool({ name: "find_skills", arguments: { query: "greeting" } });
  check(!found.isError && textOf(found).includes(`- ${SKILL}:`), `find_skills answered ${textOf(found)}`);

  const ran = await client.callTool({ name: "run", arguments: { argv: ["sh", `/skills/${SKILL}/scripts/run.sh`, mode] } });
  const result = (ran.structuredContent ?? {}) as { stdout?: string };
  check(!ran.isError, `run failed: ${textOf(ran)}`);
  check(result.stdout === `from-tooly ${mode}\n`, `run printed ${JSON.stringify(result.stdout)}`);

  const read = await client.readResource({ uri: `skill://${SKILL}/SKILL.md` });
  const first = read.contents[0] as { text?: string };
  check(first.text === readFileSync(join(skillDir, "SKILL.md"), "utf8"), "SKILL.md as read is not the file's bytes");

  const Listed = z.object({
    skills: z.array(
      z.object({
        uri: z.string(),
        resources: z.array(z.object({ uri: z.string(), digest: z.string(), size: z.number() })),
      }),
    ),
  });
  const listed = await client.request({ method: "skills/list", params: {} }, Listed);
  check(listed.skills.length === 1 && listed.skills[0].uri === `skill://${SKILL}/SKILL.md`, `skills/list: ${JSON.stringify(listed)}`);
  for (const f of listed.skills[0].resources) {
    const bytes = readFileSync(join(skillDir, f.uri.slice(`skill://${SKILL}/`.length)));
    const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
    check(f.digest === digest && f.size === bytes.length, `${f.uri}: digest ${f.digest}, the bytes hash to ${digest}`);
  }

  await cancelledRun(client);
  await client.close();
  console.log(`interop (typescript, ${mode}): ok`);
}

main().catch((e) => {
  console.error(`interop (typescript): ${e instanceof Error ? e.stack : e}`);
  process.exit(1);
});
