/**
 * Package hash, file hash, set identity and bundles (docs/formats.md).
 *
 * Pure functions over bytes, plus `readPackage`, which reads a skill folder
 * the way the runner does: regular files only (a symlink, FIFO, socket or
 * device is an error naming it, never skipped), `/`-separated paths,
 * `SKILL.md` at the root. The daemon re-checks everything it receives; these
 * functions let a publisher name exactly the bytes it pins (the hash in a
 * job's binding, the identity of a selection) before it uploads them.
 */
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";

import type { Binding, Bundle, BundleFile, BundleSkill } from "./types.js";

/** Folders may nest at most this deep inside a package. */
export const MAX_DEPTH = 32;

/** A package as `path → bytes`. */
export type PackageFiles = ReadonlyMap<string, Uint8Array>;

/** SHA-256 of a file's bytes, lowercase hex. */
export function fileHash(data: Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** The paths in package-hash order: by UTF-16 code units (JavaScript's default string order). */
export function utf16Order(paths: Iterable<string>): string[] {
  return [...paths].sort();
}

/**
 * The package hash: for each file in UTF-16 order,
 * `<UTF-8 length of path>:<path>:<size>:` then its bytes, into one SHA-256.
 */
export function packageHash(files: PackageFiles): string {
  const h = createHash("sha256");
  for (const p of utf16Order(files.keys())) {
    const data = files.get(p) as Uint8Array;
    h.update(`${Buffer.byteLength(p, "utf8")}:${p}:${data.length}:`, "utf8");
    h.update(data);
  }
  return h.digest("hex");
}

/**
 * The compact JSON text whose SHA-256 is the set identity: objects with keys
 * `hash, id, revision, version` in that order, sorted by id bytes, no
 * whitespace, minimal escaping (what `JSON.stringify` writes).
 */
export function identityText(bindings: readonly Binding[]): string {
  const ordered = [...bindings].sort((a, b) => Buffer.compare(Buffer.from(a.id, "utf8"), Buffer.from(b.id, "utf8")));
  return JSON.stringify(ordered.map((b) => ({ hash: b.hash, id: b.id, revision: b.revision, version: b.version })));
}

/** The set identity of a selection of frozen bindings. */
export function setIdentity(bindings: readonly Binding[]): string {
  return createHash("sha256").update(identityText(bindings), "utf8").digest("hex");
}

/** A folder that is not an admissible package; the message names the file. */
export class PackageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PackageError";
  }
}

/**
 * Reads a skill folder as `path → bytes`. Throws `PackageError` for a
 * symlink or any other non-regular entry, a name that cannot be a package
 * path, folders nested deeper than `MAX_DEPTH`, or a missing `SKILL.md`.
 */
export function readPackage(folder: string): Map<string, Buffer> {
  if (!fs.statSync(folder, { throwIfNoEntry: false })?.isDirectory()) {
    throw new PackageError(`${folder} is not a folder; give the skill's package folder`);
  }
  const files = new Map<string, Buffer>();
  const walk = (dir: string, prefix: string, depth: number): void => {
    if (depth > MAX_DEPTH) throw new PackageError(`${dir}: folders nest deeper than ${MAX_DEPTH} levels`);
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.name.includes("\\")) throw new PackageError(`${full}: the name cannot be part of a package path`);
      const rel = prefix + entry.name;
      if (entry.isDirectory()) walk(full, rel + "/", depth + 1);
      else if (entry.isFile()) files.set(rel, fs.readFileSync(full));
      else throw new PackageError(`${full} is not a regular file or folder; a package holds only regular files`);
    }
  };
  walk(folder, "", 1);
  if (!files.has("SKILL.md")) throw new PackageError(`${folder} has no SKILL.md at its root; every package needs one`);
  return files;
}

/** One skill of a bundle, files in package-hash order (as `skill-runner pack` writes them). */
export function bundleSkill(files: PackageFiles, id: string, revision: number, version: string): BundleSkill {
  const entries: BundleFile[] = utf16Order(files.keys()).map((p) => {
    const data = files.get(p) as Uint8Array;
    return { path: p, size: data.length, hash: fileHash(data), content: Buffer.from(data).toString("base64") };
  });
  return { id, revision, version, hash: packageHash(files), files: entries };
}

/** A one-skill bundle of a folder. */
export function bundleFolder(folder: string, id: string, revision: number, version: string): Bundle {
  return { skills: [bundleSkill(readPackage(folder), id, revision, version)] };
}

/** The bundle as compact JSON, byte for byte what `skill-runner pack` prints (without its newline). */
export function bundleBytes(bundle: Bundle): Buffer {
  return Buffer.from(JSON.stringify(bundle), "utf8");
}

/** The frozen binding that names a bundle's skill. */
export function bindingOf(skill: BundleSkill): Binding {
  return { id: skill.id, revision: skill.revision, version: skill.version, hash: skill.hash };
}

/** The frozen bindings of every skill in a bundle. */
export function bindingsOf(bundle: Bundle): Binding[] {
  return bundle.skills.map(bindingOf);
}
