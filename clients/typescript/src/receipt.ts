/**
 * Checking a result's receipt (docs/receipts.md): a pure function over the
 * result document and a public key, the same checks as `skill-runner
 * verify`, with node's own `crypto` (ed25519).
 */
import { createHash, createPublicKey, verify } from "node:crypto";

import type { Json, JsonObject } from "./types.js";

export const PAYLOAD_TYPE = "application/vnd.in-toto+json";
export const STATEMENT_TYPE = "https://in-toto.io/Statement/v1";
export const PREDICATE_TYPE = "https://skill-runner.dev/receipt/v1";
const NOT_COPIED = ["stdout", "stderr", "receipt"];

/** The receipt does not hold; the message names the first mismatch. */
export class ReceiptError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ReceiptError";
  }
}

/** DSSE v1 pre-authentication encoding. */
export function pae(payloadType: string, payload: Buffer): Buffer {
  const type = Buffer.from(payloadType, "utf8");
  return Buffer.concat([
    Buffer.from(`DSSEv1 ${type.length} `, "utf8"),
    type,
    Buffer.from(` ${payload.length} `, "utf8"),
    payload,
  ]);
}

/** Canonical JSON (RFC 8785 for the documents the runner makes). */
export function canonical(value: Json | undefined): string {
  if (value === undefined) return "undefined";
  if (Array.isArray(value)) return `[${value.map(canonical).join(",")}]`;
  if (value !== null && typeof value === "object") {
    // JavaScript compares strings by UTF-16 code units, as RFC 8785 does.
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

const sha256 = (bytes: Buffer | string): string => createHash("sha256").update(bytes).digest("hex");

function base64(text: Json | undefined, what: string): Buffer {
  if (typeof text !== "string") throw new ReceiptError(`the receipt's ${what} is not base64 text`);
  const raw = Buffer.from(text, "base64");
  if (raw.toString("base64") !== text) throw new ReceiptError(`the receipt's ${what} is not standard padded base64`);
  return raw;
}

function subjects(result: JsonObject): Json[] {
  const out: Json[] = [];
  for (const name of ["stdout", "stderr"]) {
    const text = result[name];
    if (typeof text !== "string") throw new ReceiptError(`the result's ${name} is not a string`);
    out.push({ name, digest: { sha256: sha256(Buffer.from(text, "utf8")) } });
  }
  const outputs = result["outputs"];
  if (Array.isArray(outputs)) {
    for (const f of outputs) {
      if (f !== null && typeof f === "object" && !Array.isArray(f) && typeof f["path"] === "string" && typeof f["sha256"] === "string") {
        out.push({ name: `outputs/${f["path"]}`, digest: { sha256: f["sha256"] } });
      }
    }
  }
  return out;
}

const same = (a: Json | undefined, b: Json | undefined): boolean => canonical(a) === canonical(b);

function object(v: Json | undefined): JsonObject | undefined {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? v : undefined;
}

/** SHA-256 hex of the key's DER SubjectPublicKeyInfo. */
export function keyId(publicKeyPem: string): string {
  return sha256(createPublicKey(publicKeyPem).export({ type: "spki", format: "der" }));
}

/**
 * Checks `result.receipt` against `result` and the key; returns the
 * verified statement, or throws `ReceiptError`.
 */
export function verifyReceipt(result: JsonObject, publicKeyPem: string): JsonObject {
  const envelope = object(result["receipt"]);
  if (envelope === undefined) throw new ReceiptError("the result carries no receipt");
  if (canonical(Object.keys(envelope).sort()) !== canonical(["payload", "payloadType", "signatures"])) {
    throw new ReceiptError("the receipt is not a DSSE envelope");
  }
  if (envelope["payloadType"] !== PAYLOAD_TYPE) throw new ReceiptError(`the receipt's payloadType is ${JSON.stringify(envelope["payloadType"])}`);
  const sigs = envelope["signatures"];
  const sig = Array.isArray(sigs) && sigs.length === 1 ? object(sigs[0]) : undefined;
  if (sig === undefined || canonical(Object.keys(sig).sort()) !== canonical(["keyid", "sig"])) {
    throw new ReceiptError("the receipt does not have exactly one {keyid, sig} signature");
  }
  const key = createPublicKey(publicKeyPem);
  if (key.asymmetricKeyType !== "ed25519") throw new ReceiptError("the public key is not an ed25519 key");
  if (sig["keyid"] !== keyId(publicKeyPem)) throw new ReceiptError(`the receipt is signed by key ${String(sig["keyid"])}, not by this key`);
  const payload = base64(envelope["payload"], "payload");
  if (!verify(null, pae(PAYLOAD_TYPE, payload), key, base64(sig["sig"], "signature"))) {
    throw new ReceiptError("the receipt's signature does not verify: the envelope or its payload was changed");
  }
  const statement = JSON.parse(payload.toString("utf8")) as JsonObject;
  if (statement["_type"] !== STATEMENT_TYPE || statement["predicateType"] !== PREDICATE_TYPE) {
    throw new ReceiptError("the receipt's payload is not a skill-runner in-toto statement");
  }
  const predicate = object(statement["predicate"]);
  if (predicate === undefined) throw new ReceiptError("the receipt's statement has no predicate");
  const doc: JsonObject = {};
  for (const [k, v] of Object.entries(result)) if (k !== "receipt") doc[k] = v;
  if (!same(statement["subject"], subjects(doc))) {
    throw new ReceiptError("the result's outputs (stdout, stderr, outputs) do not match the receipt's subjects");
  }
  for (const name of ["stdout", "stderr"]) {
    const text = doc[name];
    const stream = { bytes: typeof text === "string" ? Buffer.byteLength(text, "utf8") : null, truncated: doc[`${name}_truncated`] ?? null };
    if (!same(object(predicate["streams"])?.[name], stream)) {
      throw new ReceiptError(`the result's ${name} length and truncation do not match the receipt`);
    }
  }
  const copied = object(predicate["result"]) ?? {};
  const digested = object(predicate["result_digests"]) ?? {};
  for (const [field, value] of Object.entries(doc)) {
    if (NOT_COPIED.includes(field)) continue;
    if (field in copied) {
      if (!same(copied[field], value)) throw new ReceiptError(`the result's ${field} does not match the receipt`);
    } else if (field in digested) {
      if (!same(digested[field], { sha256: sha256(canonical(value)) })) throw new ReceiptError(`the result's ${field} does not match the receipt's digest`);
    } else {
      throw new ReceiptError(`the result's ${field} is not covered by the receipt`);
    }
  }
  for (const field of [...Object.keys(copied), ...Object.keys(digested)]) {
    if (!(field in doc)) throw new ReceiptError(`the receipt covers ${field}, which the result lacks`);
  }
  const mode = object(doc["identity"])?.["mode"] ?? null;
  if (!same(object(predicate["runner"])?.["host_identity_mode"], mode)) throw new ReceiptError("the result's identity mode does not match the receipt");
  if (!same(predicate["execution_id"], doc["execution_id"])) throw new ReceiptError("the result's execution_id does not match the receipt");
  return statement;
}
