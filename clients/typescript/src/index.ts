/**
 * Client of the skill-runner daemon (`skill-runner serve`) for Node >= 20,
 * without runtime dependencies. See clients/README.md for every method and
 * the route it maps to.
 */
export * from "./bundle.js";
export { Client, type SessionSkill, inputFile } from "./client.js";
export * from "./environment.js";
export { BadRequest, Busy, Conflict, Gone, NotFound, ServerError, SkillRunnerError, Unauthorized } from "./errors.js";
export { type RetryOptions, retrying } from "./retry.js";
export { ReceiptError, canonical, keyId, pae, verifyReceipt } from "./receipt.js";
export { EventStream, Transport, type TransportOptions } from "./transport.js";
export * from "./types.js";
