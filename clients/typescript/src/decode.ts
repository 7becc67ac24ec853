// Reply decoders: the parsed JSON of a reply (`unknown`) checked field by field against the
// protocol (docs/protocol.md#http-api) and rebuilt as the typed reply — no cast anywhere, so
// what the types say is what was checked. Unknown fields are ignored; a missing field, a wrong
// type or a value outside its closed set is a DecodeError naming the field (the transport
// turns it into a MalformedReplyError, a pre-provider error under LANE_REQUIRED=1).
import type { JsonObject, JsonValue } from "./jcs.js";
import type {
  CooldownReply,
  CoordinatorKind,
  HeartbeatReason,
  HeartbeatReply,
  InFlightJob,
  LaneReply,
  Outcome,
  Owner,
  Pause,
  PauseReason,
  ReceiptPhase,
  ReceiptReply,
  ReceiptRow,
  ReconcileReply,
  ReleaseReason,
  ReleaseReply,
  StatusReply,
  Ticket,
  TicketState,
} from "./types.js";

export class DecodeError extends Error {}

/** True when the list L names every member of T — checked only once the document makes T a
 * closed set (a plain `string` in an older document accepts any list). */
type Covers<T, L> = string extends T ? true : [Exclude<T, L>] extends [never] ? true : false;

/** A closed set's values, checked at compile time against the generated type T: each value
 * must be a member of T, and every member of T must be listed. */
function closedSet<T extends string>() {
  return <const L extends readonly T[]>(
    values: L & (Covers<T, L[number]> extends true ? unknown : never),
  ): L => values;
}

export const COORDINATOR_KINDS = closedSet<CoordinatorKind>()([
  "actor-sqlite",
  "actor-postgres",
  "local-sqlite",
]);
/** The kinds that are a shared coordinator (LANE_REQUIRED=1 accepts only these). */
export const SHARED_KINDS: readonly string[] = ["actor-sqlite", "actor-postgres"];
const TICKET_STATES = closedSet<TicketState>()(["queued", "held", "done", "expired"]);
const PHASES = closedSet<ReceiptPhase>()([
  "lease-acquired",
  "references-applied",
  "provider-submitted",
  "provider-terminal",
]);
const HEARTBEAT_REASONS = closedSet<HeartbeatReason>()(["not-held", "expired", "done", "not-owner"]);
const RELEASE_REASONS = closedSet<ReleaseReason>()(["expired", "already-done", "not-owner"]);
const OUTCOMES = closedSet<Outcome>()([
  "completed",
  "failed",
  "timeout",
  "lease-lost",
  "not-submitted",
  "slot-busy",
  "abandoned",
  "expired",
]);
const PAUSE_REASONS = closedSet<PauseReason>()(["provider-human-check"]);

// ---- primitives --------------------------------------------------------------------------

type Fields = ReadonlyMap<string, unknown>;

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : `${typeof v} ${JSON.stringify(v)}`;
}

function fail(at: string, want: string, got: unknown): never {
  throw new DecodeError(`${at}: expected ${want}, got ${describe(got)}`);
}

/** The fields of a JSON object. */
export function fields(v: unknown, at: string): Fields {
  if (typeof v !== "object" || v === null || Array.isArray(v)) fail(at, "an object", v);
  return new Map<string, unknown>(Object.entries(v));
}

function str(o: Fields, key: string, at: string): string {
  const v = o.get(key);
  return typeof v === "string" ? v : fail(`${at}.${key}`, "a string", v);
}

function strOrNull(o: Fields, key: string, at: string): string | null {
  const v = o.get(key);
  return v === null || v === undefined ? null : str(o, key, at);
}

function num(o: Fields, key: string, at: string): number {
  const v = o.get(key);
  return typeof v === "number" && Number.isFinite(v) ? v : fail(`${at}.${key}`, "a number", v);
}

function numOrNull(o: Fields, key: string, at: string): number | null {
  const v = o.get(key);
  return v === null || v === undefined ? null : num(o, key, at);
}

function int(o: Fields, key: string, at: string): number {
  const v = num(o, key, at);
  return Number.isInteger(v) ? v : fail(`${at}.${key}`, "an integer", v);
}

function intOrNull(o: Fields, key: string, at: string): number | null {
  const v = o.get(key);
  return v === null || v === undefined ? null : int(o, key, at);
}

function bool(o: Fields, key: string, at: string): boolean {
  const v = o.get(key);
  return typeof v === "boolean" ? v : fail(`${at}.${key}`, "true or false", v);
}

function boolOrNull(o: Fields, key: string, at: string): boolean | null {
  const v = o.get(key);
  return v === null || v === undefined ? null : bool(o, key, at);
}

function member<T extends string>(values: readonly T[], o: Fields, key: string, at: string): T {
  const v = o.get(key);
  const found = values.find((x) => x === v);
  return found !== undefined ? found : fail(`${at}.${key}`, `one of ${values.join(", ")}`, v);
}

function memberOrNull<T extends string>(
  values: readonly T[],
  o: Fields,
  key: string,
  at: string,
): T | null {
  const v = o.get(key);
  return v === null || v === undefined ? null : member(values, o, key, at);
}

function list<T>(o: Fields, key: string, at: string, item: (v: unknown, at: string) => T): T[] {
  const v = o.get(key);
  if (!Array.isArray(v)) fail(`${at}.${key}`, "an array", v);
  const out: T[] = [];
  v.forEach((x: unknown, i) => out.push(item(x, `${at}.${key}[${i}]`)));
  return out;
}

function strings(o: Fields, key: string, at: string): string[] {
  return list(o, key, at, (v, where) => (typeof v === "string" ? v : fail(where, "a string", v)));
}

function orNull<T>(o: Fields, key: string, at: string, decode: (v: unknown, at: string) => T) {
  const v = o.get(key);
  return v === null || v === undefined ? null : decode(v, `${at}.${key}`);
}

/** Any JSON value, rebuilt: what `JSON.parse` returned, checked and typed (a DecodeError
 * naming where it is not JSON: a number that is not finite, a value JSON has no form for). */
export function jsonValue(v: unknown, at: string): JsonValue {
  if (v === null || typeof v === "boolean" || typeof v === "string") return v;
  if (typeof v === "number") return Number.isFinite(v) ? v : fail(at, "a finite number", v);
  if (Array.isArray(v)) return v.map((x: unknown, i) => jsonValue(x, `${at}[${i}]`));
  return jsonObject(v, at);
}

/** A JSON object (a receipt payload), rebuilt like jsonValue. */
export function jsonObject(v: unknown, at: string): JsonObject {
  const out: JsonObject = {};
  for (const [key, item] of fields(v, at)) {
    out[key] = jsonValue(item, `${at}.${key}`);
  }
  return out;
}

function kind(o: Fields, at: string): CoordinatorKind {
  return member(COORDINATOR_KINDS, o, "coordinator", at);
}

// ---- the protocol's objects --------------------------------------------------------------

export function ticket(v: unknown, at: string): Ticket {
  const o = fields(v, at);
  return {
    ticketId: str(o, "ticketId", at),
    lane: str(o, "lane", at),
    state: member(TICKET_STATES, o, "state", at),
    machineId: str(o, "machineId", at),
    claimId: strOrNull(o, "claimId", at),
    project: str(o, "project", at),
    scene: str(o, "scene", at),
    promptHash: str(o, "promptHash", at),
    position: intOrNull(o, "position", at),
    etaSeconds: numOrNull(o, "etaSeconds", at),
    enqueuedAt: num(o, "enqueuedAt", at),
    heldAt: numOrNull(o, "heldAt", at),
    leaseExpiresAt: numOrNull(o, "leaseExpiresAt", at),
    heartbeatAt: numOrNull(o, "heartbeatAt", at),
    fence: intOrNull(o, "fence", at),
  };
}

export function owner(v: unknown, at: string): Owner {
  const o = fields(v, at);
  return { machineId: str(o, "machineId", at), claimId: strOrNull(o, "claimId", at) };
}

export function pause(v: unknown, at: string): Pause {
  const o = fields(v, at);
  return {
    reasonCode: member(PAUSE_REASONS, o, "reasonCode", at),
    startedAt: num(o, "startedAt", at),
    until: num(o, "until", at),
    machineId: str(o, "machineId", at),
    claimId: strOrNull(o, "claimId", at),
    ticketId: str(o, "ticketId", at),
  };
}

export function inFlightJob(v: unknown, at: string): InFlightJob {
  const o = fields(v, at);
  return {
    ticketId: str(o, "ticketId", at),
    fence: intOrNull(o, "fence", at),
    machineId: str(o, "machineId", at),
    claimId: strOrNull(o, "claimId", at),
    project: str(o, "project", at),
    scene: str(o, "scene", at),
    submittedAt: num(o, "submittedAt", at),
    since: num(o, "since", at),
    holdUntil: num(o, "holdUntil", at),
  };
}

export function receiptRow(v: unknown, at: string): ReceiptRow {
  const o = fields(v, at);
  return {
    receiptId: str(o, "receiptId", at),
    ticketId: str(o, "ticketId", at),
    phase: member(PHASES, o, "phase", at),
    machineId: str(o, "machineId", at),
    payload: jsonObject(o.get("payload"), `${at}.payload`),
    contentHash: str(o, "contentHash", at),
    contentHashVerified: boolOrNull(o, "contentHashVerified", at),
    createdAt: num(o, "createdAt", at),
  };
}

// ---- replies -----------------------------------------------------------------------------

export function laneReply(v: unknown, at = "reply"): LaneReply {
  const o = fields(v, at);
  return {
    coordinator: kind(o, at),
    lane: str(o, "lane", at),
    enforced: bool(o, "enforced", at),
    ticket: ticket(o.get("ticket"), `${at}.ticket`),
    granted: bool(o, "granted", at),
    duplicate: bool(o, "duplicate", at),
    owner: owner(o.get("owner"), `${at}.owner`),
    pause: orNull(o, "pause", at, pause),
  };
}

export function heartbeatReply(v: unknown, at = "reply"): HeartbeatReply {
  const o = fields(v, at);
  return {
    coordinator: kind(o, at),
    refreshed: bool(o, "refreshed", at),
    state: member(TICKET_STATES, o, "state", at),
    leaseExpiresAt: numOrNull(o, "leaseExpiresAt", at),
    fence: intOrNull(o, "fence", at),
    reason: memberOrNull(HEARTBEAT_REASONS, o, "reason", at),
  };
}

export function releaseReply(v: unknown, at = "reply"): ReleaseReply {
  const o = fields(v, at);
  return {
    coordinator: kind(o, at),
    released: bool(o, "released", at),
    state: member(TICKET_STATES, o, "state", at),
    outcome: memberOrNull(OUTCOMES, o, "outcome", at),
    promoted: strings(o, "promoted", at),
    reason: memberOrNull(RELEASE_REASONS, o, "reason", at),
  };
}

export function receiptReply(v: unknown, at = "reply"): ReceiptReply {
  const o = fields(v, at);
  return {
    coordinator: kind(o, at),
    stored: bool(o, "stored", at),
    replay: bool(o, "replay", at),
    contentHashVerified: boolOrNull(o, "contentHashVerified", at),
  };
}

export function cooldownReply(v: unknown, at = "reply"): CooldownReply {
  const o = fields(v, at);
  return {
    coordinator: kind(o, at),
    paused: bool(o, "paused", at),
    extended: bool(o, "extended", at),
    pause: orNull(o, "pause", at, pause),
  };
}

export function reconcileReply(v: unknown, at = "reply"): ReconcileReply {
  const o = fields(v, at);
  return {
    coordinator: kind(o, at),
    reconciled: bool(o, "reconciled", at),
    promoted: strings(o, "promoted", at),
  };
}

/** Status, with a lenient receipt trail (as the Python client's parse_status): a row this
 * client cannot read (a phase or a field a newer writer introduced) is skipped and counted in
 * `unreadableReceipts`; a reply without receipt keys has neither key. */
export function statusReply(v: unknown, at = "reply"): StatusReply {
  const o = fields(v, at);
  const reply: StatusReply = {
    coordinator: kind(o, at),
    lane: str(o, "lane", at),
    enforced: bool(o, "enforced", at),
    capacity: intOrNull(o, "capacity", at),
    held: list(o, "held", at, ticket),
    queued: list(o, "queued", at, ticket),
    queuedTotal: int(o, "queuedTotal", at),
    pause: orNull(o, "pause", at, pause),
    now: num(o, "now", at),
    inFlight: list(o, "inFlight", at, inFlightJob),
  };
  if (o.has("recentReceipts")) {
    const rows = o.get("recentReceipts");
    const good: ReceiptRow[] = [];
    let bad = 0;
    for (const [i, row] of (Array.isArray(rows) ? rows : [rows]).entries()) {
      try {
        good.push(receiptRow(row, `${at}.recentReceipts[${i}]`));
      } catch (err) {
        if (!(err instanceof DecodeError)) throw err;
        bad += 1;
      }
    }
    reply.recentReceipts = good;
    reply.unreadableReceipts = bad;
  }
  return reply;
}
