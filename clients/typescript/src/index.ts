/**
 * Client of the skill-runner daemon (`skill-runner serve`) for Node >= 20,
 * without runtime dependencies. See clients/README.md for every method and
 * the route it maps to.
 */
export * from "./bundle.js";
export { Client, type SessionSkill, inputFile } from "./client.js";
export * from "./environment.js";
export { SkillRunnerError } from "./errors.js";
export { ReceiptError, canonical, keyId, pae, verifyReceipt } from "./receipt.js";
export { EventStream, Transport, type TransportOptions } from "./transport.js";
export * from "./types.js";
