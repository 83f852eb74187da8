/**
 * Starts a real `skill-runner serve` for the tests: temp data dir, temp socket.
 *
 * The binary is `$SKILL_RUNNER_BIN`, else `target/debug/skill-runner` of this
 * repository (`scripts/test-clients` builds it). Commands run in real
 * bubblewrap sandboxes; nothing here mocks the daemon.
 */
import { type ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

/** The repository root (this file runs from clients/typescript/dist/test/). */
export const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
export const HELLO = path.join(REPO, "examples", "skills", "hello");
export const VECTORS = path.join(REPO, "runner", "tests", "vectors", "package-hash.json");
/** Hang protection only; nothing asserts on time. */
export const PATIENCE_MS = 60_000;

const SETTINGS = ["SKILL_RUNNER_TOKEN", "SKILL_RUNNER_SOCKET", "SKILL_RUNNER_LISTEN", "SKILL_RUNNER_CONFIG", "SKILL_RUNNER_ROOTS", "SKILL_RUNNER_DATA_DIR"];

export function runnerBin(): string {
  const bin = process.env.SKILL_RUNNER_BIN || path.join(REPO, "target", "debug", "skill-runner");
  try {
    fs.accessSync(bin, fs.constants.X_OK);
  } catch {
    throw new Error(`${bin} is not an executable skill-runner; run cargo build -p skill-runner or set SKILL_RUNNER_BIN`);
  }
  return bin;
}

export class Daemon {
  socketPath?: string;
  url?: string;

  private constructor(
    readonly dir: string,
    private readonly child: ChildProcess,
    private readonly logPath: string,
  ) {}

  /** Starts a daemon on a temp socket, or on 127.0.0.1 with `token`. */
  static async start(options: { tcp?: boolean; token?: string; extra?: string[] } = {}): Promise<Daemon> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sr-client-ts-"));
    // A root runner's sandbox user must pass through the folders above the data dir.
    fs.chmodSync(dir, 0o755);
    const args = ["--data-dir", path.join(dir, "data"), "serve"];
    args.push(...(options.tcp ? ["--listen", "127.0.0.1:0"] : ["--socket", path.join(dir, "run", "api.sock")]));
    if (options.token !== undefined) {
      const tokenFile = path.join(dir, "token");
      fs.writeFileSync(tokenFile, options.token + "\n", { mode: 0o600 });
      args.push("--token-file", tokenFile);
    }
    args.push(...(options.extra ?? []));
    const env: NodeJS.ProcessEnv = { ...process.env, SKILL_RUNNER_LOG: "info" };
    for (const k of SETTINGS) delete env[k];
    const logPath = path.join(dir, "daemon.log");
    const log = fs.openSync(logPath, "w");
    const child = spawn(runnerBin(), args, { cwd: dir, env, stdio: ["ignore", "ignore", log] });
    fs.closeSync(log);
    const d = new Daemon(dir, child, logPath);
    const deadline = Date.now() + PATIENCE_MS;
    for (;;) {
      const m = /listening on (unix:|http:\/\/)(\S+)/.exec(d.log());
      if (m) {
        const where = (m[2] as string).replace(/"/g, "");
        if (m[1] === "unix:") d.socketPath = where;
        else d.url = `http://${where}`;
        return d;
      }
      if (child.exitCode !== null || child.signalCode !== null || Date.now() > deadline) {
        await d.stop();
        throw new Error(`skill-runner serve did not start:\n${d.log()}`);
      }
      await sleep(20);
    }
  }

  log(): string {
    return fs.readFileSync(this.logPath, "utf8");
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((resolve) => this.child.once("exit", resolve));
      this.child.kill("SIGTERM");
      const timer = setTimeout(() => this.child.kill("SIGKILL"), PATIENCE_MS);
      await exited;
      clearTimeout(timer);
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
