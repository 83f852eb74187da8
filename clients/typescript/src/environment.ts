/**
 * Environment uploads (docs/daemon.md, "Environments"): a folder's tree as
 * the upload document, with its environment hash (docs/formats.md,
 * "Environments") computed here so the daemon can check the claim.
 *
 * The hash, for each entry in the byte order of its UTF-8 path:
 * a regular file is `f:` (`x:` when executable) `<len(path)>:<path>:<size>:`
 * and its bytes; a symlink `l:<len(path)>:<path>:<len(target)>:<target>`;
 * the SHA-256 of the concatenation, in lowercase hex. Folders are implied;
 * anything but files, folders and symlinks is refused.
 */
import { createHash } from "node:crypto";
import { lstatSync, readFileSync, readdirSync, readlinkSync } from "node:fs";
import { join } from "node:path";

/** One entry of a tree: a file's bytes, or a symlink's target. */
export type TreeEntry =
  | { path: string; kind: "file"; bytes: Buffer; executable: boolean }
  | { path: string; kind: "symlink"; target: string };

/** The environment hash of `entries` (paths and targets already admissible). */
export function environmentHash(entries: TreeEntry[]): string {
  const sorted = [...entries].sort((a, b) => Buffer.compare(Buffer.from(a.path, "utf8"), Buffer.from(b.path, "utf8")));
  const sha = createHash("sha256");
  for (const e of sorted) {
    const p = Buffer.from(e.path, "utf8");
    if (e.kind === "symlink") {
      const t = Buffer.from(e.target, "utf8");
      sha.update(`l:${p.length}:`).update(p).update(`:${t.length}:`).update(t);
    } else {
      sha.update(e.executable ? "x:" : "f:").update(`${p.length}:`).update(p).update(`:${e.bytes.length}:`).update(e.bytes);
    }
  }
  return sha.digest("hex");
}

/** Every file and symlink below `folder`, never following a link. */
export function treeEntries(folder: string, prefix = ""): TreeEntry[] {
  const out: TreeEntry[] = [];
  for (const name of readdirSync(join(folder, prefix)).sort()) {
    const rel = prefix === "" ? name : `${prefix}/${name}`;
    const full = join(folder, rel);
    const st = lstatSync(full);
    if (st.isSymbolicLink()) out.push({ path: rel, kind: "symlink", target: readlinkSync(full) });
    else if (st.isFile()) out.push({ path: rel, kind: "file", bytes: readFileSync(full), executable: (st.mode & 0o111) !== 0 });
    else if (st.isDirectory()) out.push(...treeEntries(folder, rel));
    else throw new Error(`${full} is not a regular file, folder or symlink`);
  }
  return out;
}

/** Where a tree came from: the lock's text and the interpreter it was built for. */
export interface Provenance {
  python?: string;
  interpreter?: string;
}

/** The `POST /v1/environments` upload of the tree at `folder`. */
export function environmentUpload(folder: string, id: string, provenance: Provenance = {}): Record<string, unknown> {
  const entries = treeEntries(folder);
  const doc: Record<string, unknown> = {
    id,
    hash: environmentHash(entries),
    files: entries.flatMap((e) => (e.kind === "file" ? [{ path: e.path, content: e.bytes.toString("base64"), executable: e.executable }] : [])),
    symlinks: entries.flatMap((e) => (e.kind === "symlink" ? [{ path: e.path, target: e.target }] : [])),
  };
  if (provenance.python !== undefined) doc.python = provenance.python;
  if (provenance.interpreter !== undefined) doc.interpreter = provenance.interpreter;
  return doc;
}
