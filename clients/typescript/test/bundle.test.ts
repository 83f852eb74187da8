/** Package hash, set identity and bundles against the vectors and `skill-runner pack`. */
import * as assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { after, describe, test } from "node:test";

import {
  type Binding,
  PackageError,
  bundleBytes,
  bundleFolder,
  bundleSkill,
  fileHash,
  packageHash,
  readPackage,
  setIdentity,
  utf16Order,
} from "../src/index.js";
import { HELLO, VECTORS, runnerBin } from "./daemon.js";

interface Vectors {
  packages: Array<{ name: string; files: Array<{ path: string; content_base64: string; hash: string }>; package_hash: string; utf16_order: string[] }>;
  sets: Array<{ name: string; bindings: Binding[]; identity: string }>;
}
const V = JSON.parse(fs.readFileSync(VECTORS, "utf8")) as Vectors;

const filesOf = (c: Vectors["packages"][number]) => new Map(c.files.map((f) => [f.path, Buffer.from(f.content_base64, "base64")]));

describe("package hash vectors", () => {
  for (const c of V.packages) {
    test(c.name, () => {
      const files = filesOf(c);
      for (const f of c.files) assert.equal(fileHash(files.get(f.path) as Buffer), f.hash);
      assert.deepEqual(utf16Order(files.keys()), c.utf16_order);
      assert.equal(packageHash(files), c.package_hash);
    });
  }
});

describe("set identity vectors", () => {
  for (const c of V.sets) {
    test(c.name, () => assert.equal(setIdentity(c.bindings), c.identity));
  }
  test("the empty selection", () =>
    assert.equal(setIdentity([]), "4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"));
});

test("a bundle is byte for byte what skill-runner pack prints", () => {
  const packed = execFileSync(runnerBin(), ["pack", HELLO, "--id", "hello", "--revision", "1", "--version", "1.0.0"]);
  assert.equal(Buffer.concat([bundleBytes(bundleFolder(HELLO, "hello", 1, "1.0.0")), Buffer.from("\n")]).toString(), packed.toString());
});

test("the minimal bundle matches the documented text", () => {
  const c = V.packages.find((p) => p.name === "minimal");
  assert.ok(c);
  assert.equal(
    bundleBytes({ skills: [bundleSkill(filesOf(c), "minimal", 1, "1.0.0")] }).toString(),
    '{"skills":[{"id":"minimal","revision":1,"version":"1.0.0","hash":"8836d9e71f42c21633175675a1ca46ad530141a3142c799355823bbe147044bf",' +
      '"files":[{"path":"SKILL.md","size":68,"hash":"1d5db76dbae74ed024b3edb0fa0f87f11ea32208f7606c5c9b70e6eb0962b158",' +
      '"content":"LS0tCm5hbWU6IG1pbmltYWwKZGVzY3JpcHRpb246IE9ubHkgaW5zdHJ1Y3Rpb25zLgotLS0KRG8gdGhlIHRoaW5nLgo="}]}]}',
  );
});

describe("readPackage", () => {
  const made: string[] = [];
  const folder = (): string => {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), "sr-pkg-"));
    made.push(d);
    return d;
  };
  after(() => made.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  test("reads nested files and ignores empty folders", () => {
    const d = folder();
    fs.writeFileSync(path.join(d, "SKILL.md"), "x");
    fs.mkdirSync(path.join(d, "a", "b"), { recursive: true });
    fs.writeFileSync(path.join(d, "a", "b", "c.txt"), "deep");
    fs.mkdirSync(path.join(d, "empty"));
    assert.deepEqual(readPackage(d), new Map([["SKILL.md", Buffer.from("x")], ["a/b/c.txt", Buffer.from("deep")]]));
  });

  test("refuses a symlink instead of skipping it", () => {
    const d = folder();
    fs.writeFileSync(path.join(d, "SKILL.md"), "x");
    fs.symlinkSync("/etc/passwd", path.join(d, "link"));
    assert.throws(() => readPackage(d), (e: unknown) => e instanceof PackageError && /link is not a regular file/.test(e.message));
  });

  test("refuses a folder without SKILL.md", () => {
    const d = folder();
    fs.writeFileSync(path.join(d, "README.md"), "x");
    assert.throws(() => readPackage(d), /no SKILL.md/);
  });
});
