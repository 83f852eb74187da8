/** verifyReceipt: a daemon's result verifies against GET /v1/receipt-key; a changed result or another key is refused. */
import * as assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { Client, ReceiptError, type JsonObject, verifyReceipt } from "../src/index.js";
import { Daemon } from "./daemon.js";

describe("receipts", () => {
  let daemon: Daemon;
  let client: Client;
  before(async () => {
    daemon = await Daemon.start();
    client = new Client({ socketPath: daemon.socketPath as string });
  });
  after(async () => {
    await daemon.stop();
  });

  test("a daemon's result verifies and every change is refused", async () => {
    const key = await client.receiptKey();
    const pem = String(key["public_key_pem"]);
    const result = (await client.run({ argv: ["sh", "-c", "echo hi; echo err >&2"] })) as JsonObject;
    const statement = verifyReceipt(result, pem);
    assert.equal((statement["predicate"] as JsonObject)["execution_id"], result["execution_id"]);
    for (const [field, value] of [["stdout", "hj\n"], ["exit_code", 1], ["status", "failed"], ["extra", true]] as const) {
      const changed = { ...JSON.parse(JSON.stringify(result)), [field]: value } as JsonObject;
      assert.throws(() => verifyReceipt(changed, pem), ReceiptError, field);
    }
    const other = generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "pem" }).toString();
    assert.throws(() => verifyReceipt(result, other), /not by this key/);
  });
});
