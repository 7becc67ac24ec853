// lane-coordinator-client: the TypeScript client of the lane coordinator (docs/client.md#typescript).
export * from "./errors.js";
export * from "./types.js";
export { type JsonObject, type JsonValue, canonicalJson, contentHash, receiptIdFor } from "./jcs.js";
export {
  DEFAULT_RETRY,
  NO_RETRY,
  RETRY_FIRST_DELAY_SECONDS,
  RETRY_JITTER_FRACTION,
  RETRY_MAX_DELAY_SECONDS,
  RETRY_MIN_ATTEMPT_SECONDS,
  type RetryPolicy,
  retryDelay,
  safeUrl,
} from "./transport.js";
export { COORDINATOR_KINDS, DecodeError, SHARED_KINDS, jsonObject, jsonValue } from "./decode.js";
export {
  DEFAULT_AWAIT_SECONDS,
  DEFAULT_COOLDOWN_REASON,
  DEFAULT_TIMEOUT_SECONDS,
  LaneClient,
  type LaneClientOptions,
  PROTOCOL_VERSION,
  waitForGrant,
} from "./client.js";
export { type Environment, type Settings, type SettingsOptions, connect, loadSettings } from "./config.js";
export { VERSION } from "./version.js";
export type { components, paths } from "./schema.js";
