// The wire types the wrapper takes and returns: named parts of the generated src/schema.ts
// (`npm run generate`, from the coordinator's GET /openapi.json). Each reply type picks the
// fields the decoder (src/decode.ts) checks, so a field the document adds later does not
// break the build, and a field it tightens (nullable → never null, string → its closed set)
// tightens these types with it: the decoders already produce the tight form.
import type { components } from "./schema.js";
import type { JsonObject } from "./jcs.js";

type S = components["schemas"];

// ---- request bodies (what the wrapper sends) -----------------------------------------------
export type AcquireBody = S["AcquireBody"];
export type AwaitBody = S["AwaitBody"];
export type HeartbeatBody = S["HeartbeatBody"];
export type ReleaseBody = S["ReleaseBody"];
export type ReceiptBody = S["ReceiptBody"];
export type CooldownBody = S["CooldownBody"];
export type ReconcileBody = S["ReconcileBody"];
export type StatusBody = S["StatusBody"];

// ---- closed sets -------------------------------------------------------------------------
export type TicketState = S["Ticket"]["state"];
export type ReceiptPhase = S["ReceiptBody"]["phase"];
/** What a driver may report on release (docs/protocol.md#post-v1lanesrelease). */
export type ReleaseOutcome = NonNullable<S["ReleaseBody"]["outcome"]>;
/** How a provider job ended, for reconcile (docs/protocol.md#reconcile). */
export type ReconcileOutcome = S["ReconcileBody"]["outcome"];
export type CooldownReason = S["CooldownBody"]["reasonCode"];
export type CoordinatorKind = S["LaneReply"]["coordinator"];
export type HeartbeatReason = NonNullable<S["HeartbeatReply"]["reason"]>;
export type ReleaseReason = NonNullable<S["ReleaseReply"]["reason"]>;
export type Outcome = NonNullable<S["ReleaseReply"]["outcome"]>;
export type PauseReason = S["Pause"]["reasonCode"];

// ---- replies -----------------------------------------------------------------------------
export type Ticket = Pick<
  S["Ticket"],
  | "ticketId"
  | "lane"
  | "state"
  | "machineId"
  | "claimId"
  | "project"
  | "scene"
  | "promptHash"
  | "position"
  | "etaSeconds"
  | "enqueuedAt"
  | "heldAt"
  | "leaseExpiresAt"
  | "heartbeatAt"
  | "fence"
>;
export type Owner = Pick<S["Owner"], "machineId" | "claimId">;
export type Pause = Pick<
  S["Pause"],
  "reasonCode" | "startedAt" | "until" | "machineId" | "claimId" | "ticketId"
>;
export type InFlightJob = Pick<
  S["InFlightJob"],
  | "ticketId"
  | "fence"
  | "machineId"
  | "claimId"
  | "project"
  | "scene"
  | "submittedAt"
  | "since"
  | "holdUntil"
>;
/** A stored receipt as status shows it; `payload` is the JSON object that was written. */
export type ReceiptRow = Pick<
  S["ReceiptRow"],
  "receiptId" | "ticketId" | "phase" | "machineId" | "contentHash" | "contentHashVerified" | "createdAt"
> & { payload: JsonObject };

export type LaneReply = Pick<
  S["LaneReply"],
  "coordinator" | "lane" | "enforced" | "granted" | "duplicate"
> & { ticket: Ticket; owner: Owner; pause: Pause | null };
export type HeartbeatReply = Pick<
  S["HeartbeatReply"],
  "coordinator" | "refreshed" | "state" | "leaseExpiresAt" | "fence" | "reason"
>;
export type ReleaseReply = Pick<
  S["ReleaseReply"],
  "coordinator" | "released" | "state" | "outcome" | "promoted" | "reason"
>;
export type ReceiptReply = Pick<
  S["ReceiptReply"],
  "coordinator" | "stored" | "replay" | "contentHashVerified"
>;
/** A receipt's reply with what was sent: its id, its hash, and 201 (stored) or 200 (replay). */
export type ReceiptResult = ReceiptReply & {
  receiptId: string;
  contentHash: string;
  httpStatus: number;
};
export type CooldownReply = Pick<S["CooldownReply"], "coordinator" | "paused" | "extended"> & {
  pause: Pause | null;
};
export type ReconcileReply = Pick<S["ReconcileReply"], "coordinator" | "reconciled" | "promoted">;
export type StatusReply = Pick<
  S["StatusReply"],
  "coordinator" | "lane" | "enforced" | "capacity" | "queuedTotal" | "now"
> & {
  held: Ticket[];
  queued: Ticket[];
  pause: Pause | null;
  inFlight: InFlightJob[];
  /** With includeReceipts on an enforced lane: the rows this client could read, newest first. */
  recentReceipts?: ReceiptRow[];
  /** Rows of the trail this client could not read (0: the trail is complete). */
  unreadableReceipts?: number;
};
