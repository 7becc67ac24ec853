// LaneClient: one method per driver call of the coordinator (docs/protocol.md#http-api), typed
// replies, fail-closed when required — the TypeScript twin of the Python client's LaneClient
// (client/api.py, client/backend.py). No local queue: a LaneClient always talks to a shared
// coordinator (docs/client.md#typescript).
//
//   const lane = connect(loadSettings());          // LANE_COORDINATOR_URL, LANE_TOKEN, ...
//   let r = await lane.acquire("seedance-direct:main-unlimited", project, scene, promptHash);
//   r = await waitForGrant(lane, r);               // long-polls await while queued
import { ConfigError, PreProviderError } from "./errors.js";
import * as decode from "./decode.js";
import { type JsonObject, contentHash, receiptIdFor } from "./jcs.js";
import { DEFAULT_RETRY, type RetryPolicy, Transport, safeUrl, urlProblem } from "./transport.js";
import type {
  AcquireBody,
  AwaitBody,
  CooldownBody,
  CooldownReason,
  CooldownReply,
  HeartbeatBody,
  HeartbeatReply,
  LaneReply,
  ReceiptBody,
  ReceiptPhase,
  ReceiptResult,
  ReconcileBody,
  ReconcileOutcome,
  ReconcileReply,
  ReleaseBody,
  ReleaseOutcome,
  ReleaseReply,
  StatusBody,
  StatusReply,
} from "./types.js";

export const PROTOCOL_VERSION = 1;
export const DEFAULT_TIMEOUT_SECONDS = 10;
export const DEFAULT_AWAIT_SECONDS = 30;
export const DEFAULT_COOLDOWN_REASON: CooldownReason = "provider-human-check";

export interface LaneClientOptions {
  /** The shared coordinator, `http(s)://host:port` (LANE_COORDINATOR_URL). */
  url: string;
  /** The bearer token (LANE_TOKEN). */
  token: string;
  /** This computer's stable, unique name (LANE_MACHINE_ID). */
  machineId: string;
  /** This driver process's claim (LANE_CLAIM); null: the machine-only owner rule. */
  claimId?: string | null;
  /** Every call's total time, retries included (LANE_TIMEOUT_SECONDS; default 10). */
  timeoutSeconds?: number;
  /** Fail closed (LANE_REQUIRED=1): every doubt about the lane is a PreProviderError. */
  required?: boolean;
  retry?: RetryPolicy;
}

export class LaneClient {
  readonly machineId: string;
  readonly claimId: string | null;
  readonly #options: LaneClientOptions;
  readonly #http: Transport;

  constructor(options: LaneClientOptions) {
    const url = (options.url ?? "").trim().replace(/\/+$/, "");
    const required = options.required ?? false;
    const missing: string[] = [];
    const problem = url ? urlProblem(url) : undefined;
    if (!url) missing.push("LANE_COORDINATOR_URL");
    else if (problem !== undefined) missing.push(`LANE_COORDINATOR_URL (${problem})`);
    if (!options.token) missing.push("LANE_TOKEN");
    if (!options.machineId) missing.push("LANE_MACHINE_ID");
    else if (!MACHINE_RE.test(options.machineId)) {
      missing.push("LANE_MACHINE_ID (must be 1-64 of [A-Za-z0-9._-])");
    }
    if (missing.length > 0) {
      const what = `missing or invalid client configuration: ${missing.join(", ")}`;
      throw required ? new PreProviderError(what) : new ConfigError(0, what);
    }
    const timeoutSeconds = options.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS;
    if (!(timeoutSeconds > 0)) throw new ConfigError(0, "timeoutSeconds: must be positive");
    this.machineId = options.machineId;
    this.claimId = options.claimId || null;
    this.#options = { ...options, url };
    this.#http = new Transport({
      url,
      token: options.token,
      timeoutSeconds,
      required,
      retry: options.retry ?? DEFAULT_RETRY,
    });
  }

  /** The coordinator's base URL (no credential in it). */
  get url(): string {
    return safeUrl(this.#http.url);
  }

  get required(): boolean {
    return this.#http.required;
  }

  get timeoutSeconds(): number {
    return this.#http.timeoutSeconds;
  }

  /** The shared coordinator's kind as its last reply said ("actor-sqlite" until then). */
  get kind(): string {
    return this.#http.reportedKind ?? "actor-sqlite";
  }

  /** A sibling for the same coordinator, token, machine, timeout and retries that sends
   * another claim (null: the machine-only owner rule, docs/protocol.md#owner-rule). */
  withClaim(claimId: string | null): LaneClient {
    return new LaneClient({ ...this.#options, claimId });
  }

  toString(): string {
    return `LaneClient(url=${this.url}, machineId=${this.machineId}, claimId=${this.claimId}, required=${this.required})`;
  }

  async #post<T>(op: string, body: object, parse: (v: unknown) => T, timeoutSeconds?: number, longPoll?: number) {
    const path = `/v1/lanes/${op}`;
    const options: { timeoutSeconds?: number; longPoll?: number } = {};
    if (timeoutSeconds !== undefined) options.timeoutSeconds = timeoutSeconds;
    if (longPoll !== undefined) options.longPoll = longPoll;
    const answer = await this.#http.request("POST", path, { ...body }, options);
    return { answer, reply: this.#http.convert(answer, parse, `POST ${path}`) };
  }

  // ---------------------------------------------- lane operations (docs/protocol.md#http-api)

  /** Take a place in the lane for one request (project, scene, promptHash): deduplicated by
   * identity, granted at once when a slot is free (docs/protocol.md#post-v1lanesacquire). */
  async acquire(
    lane: string,
    project: string,
    scene: string,
    promptHash: string,
    options: { leaseSeconds?: number } = {},
  ): Promise<LaneReply> {
    const body: AcquireBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      project,
      scene,
      promptHash,
      leaseSeconds: options.leaseSeconds ?? null,
    };
    return (await this.#post("acquire", body, decode.laneReply)).reply;
  }

  /** The long poll: answers once the ticket leaves `queued`, the pause starts, ends or
   * changes, or `waitSeconds` pass (docs/protocol.md#post-v1lanesawait). Its own timeout is
   * waitSeconds + the client's timeout. */
  async awaitTicket(
    lane: string,
    ticketId: string,
    options: { waitSeconds?: number } = {},
  ): Promise<LaneReply> {
    const waitSeconds = options.waitSeconds ?? DEFAULT_AWAIT_SECONDS;
    const body: AwaitBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      ticketId,
      waitSeconds,
    };
    const own = waitSeconds + this.timeoutSeconds;
    return (await this.#post("await", body, decode.laneReply, own, waitSeconds)).reply;
  }

  /** Refresh the lease; a "no" is `refreshed: false` with a `reason`, never an error. */
  async heartbeat(
    lane: string,
    ticketId: string,
    options: { leaseSeconds?: number } = {},
  ): Promise<HeartbeatReply> {
    const body: HeartbeatBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      ticketId,
      leaseSeconds: options.leaseSeconds ?? null,
    };
    return (await this.#post("heartbeat", body, decode.heartbeatReply)).reply;
  }

  /** End the ticket. When an earlier attempt of this call may have been applied (its reply
   * was lost) and the repeat finds the ticket done with exactly this outcome, the reply is
   * the applied release's: `released: true` (its `promoted` list was in the lost reply). */
  async release(
    lane: string,
    ticketId: string,
    options: { outcome?: ReleaseOutcome; providerJobId?: string; note?: string } = {},
  ): Promise<ReleaseReply> {
    const body: ReleaseBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      ticketId,
      outcome: options.outcome ?? null,
      providerJobId: options.providerJobId ?? null,
      note: options.note ?? null,
    };
    const { answer, reply } = await this.#post("release", body, decode.releaseReply);
    if (answer.resent && !reply.released && reply.reason === "already-done" && reply.outcome === body.outcome) {
      return { ...reply, released: true, reason: null };
    }
    return reply;
  }

  /** Append one receipt (docs/protocol.md#post-v1lanesreceipt). The RFC 8785 hash and the
   * receiptId are computed here, before the first attempt (a retried attempt is the same
   * receipt); a given `contentHash` or `receiptId` overrides the computed one. A payload with
   * no canonical form is a BadRequestError before anything is sent. */
  async receipt(
    lane: string,
    ticketId: string,
    phase: ReceiptPhase,
    payload: JsonObject,
    options: { contentHash?: string; receiptId?: string } = {},
  ): Promise<ReceiptResult> {
    const sent = options.contentHash ?? contentHash(payload);
    const receiptId = options.receiptId ?? receiptIdFor(ticketId, phase, sent);
    const body: ReceiptBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      ticketId,
      receiptId,
      phase,
      payload,
      contentHash: sent,
    };
    const { answer, reply } = await this.#post("receipt", body, decode.receiptReply);
    return { ...reply, receiptId, contentHash: sent, httpStatus: answer.status };
  }

  /** Pause the lane from a held ticket (a provider human check, docs/protocol.md#post-v1lanescooldown). */
  async cooldown(
    lane: string,
    ticketId: string,
    retryAfterSeconds: number,
    options: { reasonCode?: CooldownReason } = {},
  ): Promise<CooldownReply> {
    const body: CooldownBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      ticketId,
      reasonCode: options.reasonCode ?? DEFAULT_COOLDOWN_REASON,
      retryAfterSeconds,
    };
    return (await this.#post("cooldown", body, decode.cooldownReply)).reply;
  }

  /** End the in-flight job of an ended ticket of this machine: how its provider job ended
   * (docs/protocol.md#reconcile). 409 NotInFlightError when the ticket holds no slot. */
  async reconcile(
    lane: string,
    ticketId: string,
    outcome: ReconcileOutcome,
    options: { providerJobId?: string; note?: string } = {},
  ): Promise<ReconcileReply> {
    const body: ReconcileBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      claimId: this.claimId,
      ticketId,
      outcome,
      providerJobId: options.providerJobId ?? null,
      note: options.note ?? null,
    };
    return (await this.#post("reconcile", body, decode.reconcileReply)).reply;
  }

  /** The lane now: held, queued (promotion order), pause, in-flight jobs; with
   * `includeReceipts` the newest receipts (docs/protocol.md#post-v1lanesstatus). */
  async status(lane: string, options: { includeReceipts?: boolean } = {}): Promise<StatusReply> {
    const body: StatusBody = {
      protocolVersion: PROTOCOL_VERSION,
      lane,
      machineId: this.machineId,
      includeReceipts: options.includeReceipts ?? false,
    };
    return (await this.#post("status", body, decode.statusReply)).reply;
  }
}

const MACHINE_RE = /^[A-Za-z0-9._-]{1,64}$/;

/** Long-poll `await` until the ticket is no longer queued (or `maxWaitSeconds` pass). */
export async function waitForGrant(
  client: LaneClient,
  reply: LaneReply,
  options: { waitSeconds?: number; maxWaitSeconds?: number } = {},
): Promise<LaneReply> {
  const step = options.waitSeconds ?? DEFAULT_AWAIT_SECONDS;
  const deadline =
    options.maxWaitSeconds === undefined ? undefined : performance.now() / 1000 + options.maxWaitSeconds;
  let current = reply;
  while (current.ticket.state === "queued") {
    let waitSeconds = step;
    if (deadline !== undefined) {
      const left = deadline - performance.now() / 1000;
      if (left <= 0) break;
      waitSeconds = Math.max(1, Math.min(step, left));
    }
    current = await client.awaitTicket(current.lane, current.ticket.ticketId, { waitSeconds });
  }
  return current;
}
