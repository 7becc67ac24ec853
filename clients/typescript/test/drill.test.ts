// The acceptance drill (docs/protocol.md#acceptance-drill), steps 1-6, with two computers A
// and B as two clients with their own machineId and claim, against the real coordinator the
// pytest side started (tests/typescript: route `drill`, capacity 1, in-flight holds on); then
// an in-flight hold ended by reconcile, a cooldown, and the RFC 8785 vectors as receipts the
// coordinator verifies. The checks are client/drill's (steps_1_4.py, steps_5_6.py).
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  LaneClientError,
  type LaneReply,
  NotFoundError,
  NotHolderError,
  NotInFlightError,
  PreProviderError,
  ReceiptConflictError,
  TicketNotHeldError,
  contentHash,
  jsonObject,
  jsonValue,
  waitForGrant,
} from "lane-coordinator-client";
import { REPO, computer } from "./kit.js";

const RUN = `${process.pid}-${Date.now().toString(36)}`;
const PROJECT = "lane-drill-ts";
const HASH = contentHash({ drill: PROJECT, run: RUN });
const SHORT_LEASE_SECONDS = 15; // the protocol's minimum lease
const MAX_PROMOTION_LATENESS = 10;

/** The error a call failed with, unwrapped from PreProviderError (both clients are required). */
async function failure(call: Promise<unknown>): Promise<LaneClientError> {
  try {
    await call;
  } catch (err) {
    assert.ok(err instanceof LaneClientError, String(err));
    return err instanceof PreProviderError && err.underlying !== undefined ? err.underlying : err;
  }
  assert.fail("the call succeeded");
}

test("the drill, steps 1-6, computers A and B", async (t) => {
  const lane = `drill:ts-acceptance-${RUN}`;
  const a = computer("ts-studio-a");
  const b = computer("ts-studio-b");
  const ids = new Map<string, string>();
  const id = (key: string): string => ids.get(key) ?? assert.fail(`no ticket ${key}`);
  let fenceA = 0;
  let raceOwnerIsA = false;

  await t.test("1. A acquires shared-queue-drill-a: granted", async () => {
    const r = await a.acquire(lane, PROJECT, "shared-queue-drill-a", HASH, { leaseSeconds: 60 });
    assert.ok(r.granted && r.ticket.state === "held", `granted=${r.granted} state=${r.ticket.state}`);
    assert.equal(r.coordinator === "actor-sqlite" || r.coordinator === "actor-postgres", true);
    assert.ok(r.enforced && r.ticket.fence !== null && r.ticket.fence > 0);
    assert.deepEqual(r.owner, { machineId: "ts-studio-a", claimId: a.claimId });
    ids.set("a", r.ticket.ticketId);
    fenceA = r.ticket.fence;
    const st = await b.status(lane);
    assert.deepEqual(st.held.map((x) => [x.ticketId, x.machineId]), [[id("a"), "ts-studio-a"]]);
    const hb = await a.heartbeat(lane, id("a"));
    assert.ok(hb.refreshed && hb.reason === null && hb.state === "held" && hb.fence === fenceA);
    const other = await b.heartbeat(lane, id("a"));
    assert.ok(!other.refreshed && other.reason === "not-owner"); // a "no" is a 200, not an error
  });

  await t.test("2. B acquires shared-queue-drill-b: queued at position 1", async () => {
    const r = await b.acquire(lane, PROJECT, "shared-queue-drill-b", HASH, { leaseSeconds: 60 });
    assert.ok(!r.granted && r.ticket.state === "queued" && r.ticket.position === 1, JSON.stringify(r.ticket));
    assert.ok(r.ticket.etaSeconds !== null && r.ticket.etaSeconds >= 0);
    ids.set("b", r.ticket.ticketId);
    const st = await a.status(lane);
    assert.deepEqual(st.queued.map((x) => [x.ticketId, x.position]), [[id("b"), 1]]);
    assert.equal(st.queuedTotal, 1);
    const hb = await b.heartbeat(lane, id("b"));
    assert.ok(!hb.refreshed && hb.reason === "not-held" && hb.state === "queued");
  });

  await t.test("3. A and B race for shared-queue-race: one canonical ticket, nobody granted", async () => {
    const [ra, rb] = await Promise.all([
      a.acquire(lane, PROJECT, "shared-queue-race", HASH, { leaseSeconds: 60 }),
      b.acquire(lane, PROJECT, "shared-queue-race", HASH, { leaseSeconds: 60 }),
    ]);
    assert.equal(ra.ticket.ticketId, rb.ticket.ticketId, "two tickets for one request");
    assert.equal(Number(!ra.duplicate) + Number(!rb.duplicate), 1, "exactly one racer creates it");
    assert.ok(!ra.granted && !rb.granted, "a racer was granted while A holds the lane");
    assert.deepEqual(ra.owner, rb.owner);
    raceOwnerIsA = ra.owner.machineId === "ts-studio-a";
    const [owner, other] = raceOwnerIsA ? [ra, rb] : [rb, ra];
    assert.ok(!owner.duplicate && other.duplicate);
    assert.equal(owner.owner.claimId, raceOwnerIsA ? a.claimId : b.claimId);
    ids.set("race", ra.ticket.ticketId);
  });

  await t.test("4. A releases its exact ticket: B's parked await is granted", async (t4) => {
    const parked = b.awaitTicket(lane, id("b"), { waitSeconds: 30 });
    await new Promise((resolve) => setTimeout(resolve, 200)); // parked before A releases
    const t0 = performance.now();
    const rel = await a.release(lane, id("a"), { outcome: "completed" });
    assert.ok(rel.released && rel.state === "done" && rel.outcome === "completed" && rel.reason === null);
    assert.deepEqual(rel.promoted.slice(0, 1), [id("b")]);
    const w = await parked;
    const waited = performance.now() - t0;
    assert.ok(w.granted && w.ticket.state === "held", `state=${w.ticket.state}`);
    assert.equal(w.ticket.fence, fenceA + 1, "a grant's fence is the previous one + 1");
    assert.ok(waited < 5000, `the await answered ${waited} ms after the release`);
    t4.diagnostic(`release + the parked await's answer: ${waited.toFixed(1)} ms`);
    const again = await a.release(lane, id("a"), { outcome: "completed" });
    assert.ok(!again.released && again.reason === "already-done");
  });

  await t.test("5. a receipt: 201 stored, 200 replay, 409 for other content; A reads it once", async () => {
    const payload = { drill: PROJECT, run: RUN, step: 5, check: "receipt" };
    const r1 = await b.receipt(lane, id("b"), "lease-acquired", payload);
    assert.ok(r1.stored && !r1.replay && r1.httpStatus === 201, JSON.stringify(r1));
    assert.equal(r1.contentHashVerified, true, "the coordinator did not verify the RFC 8785 hash");
    assert.equal(r1.receiptId, `${id("b")}:lease-acquired:${r1.contentHash.slice(7, 23)}`);
    const r2 = await b.receipt(lane, id("b"), "lease-acquired", payload);
    assert.ok(!r2.stored && r2.replay && r2.httpStatus === 200 && r2.receiptId === r1.receiptId);
    const conflict = await failure(
      b.receipt(lane, id("b"), "lease-acquired", { ...payload, check: "conflict" }, { receiptId: r1.receiptId }),
    );
    assert.ok(conflict instanceof ReceiptConflictError && conflict.status === 409, conflict.toString());
    const st = await a.status(lane, { includeReceipts: true });
    const rows = (st.recentReceipts ?? []).filter((row) => row.receiptId === r1.receiptId);
    assert.equal(rows.length, 1);
    const [row] = rows;
    assert.ok(row !== undefined && row.machineId === "ts-studio-b" && row.ticketId === id("b"));
    assert.equal(row.contentHashVerified, true);
    assert.deepEqual(row.payload, payload, "the first content is kept");
    assert.equal(st.unreadableReceipts, 0);
    const refused = await failure(a.receipt(lane, id("b"), "references-applied", payload));
    assert.ok(refused instanceof NotHolderError && refused.status === 403, refused.toString());
    const plain = await a.status(lane);
    assert.equal(plain.recentReceipts, undefined); // no receipt keys unless asked
  });

  await t.test("3b. once the race ticket is held only its owner is granted", async () => {
    const rel = await b.release(lane, id("b"), { outcome: "completed" });
    assert.deepEqual(rel.promoted, [id("race")]);
    const [owner, other] = raceOwnerIsA ? [a, b] : [b, a];
    const granted = await owner.awaitTicket(lane, id("race"), { waitSeconds: 30 });
    assert.ok(granted.granted && granted.ticket.state === "held");
    const again = await other.acquire(lane, PROJECT, "shared-queue-race", HASH, { leaseSeconds: 60 });
    assert.ok(again.ticket.ticketId === id("race") && again.duplicate && !again.granted);
    assert.equal(again.owner.machineId, owner.machineId);
    const notMine = await other.release(lane, id("race"), { outcome: "completed" });
    assert.ok(!notMine.released && notMine.reason === "not-owner");
    assert.ok((await owner.release(lane, id("race"), { outcome: "completed" })).released);
  });

  await t.test("6. a short lease stops heartbeating: the alarm promotes the waiter after expiry", async (t6) => {
    const r = await a.acquire(lane, PROJECT, "shared-queue-drill-short", HASH, { leaseSeconds: SHORT_LEASE_SECONDS });
    assert.ok(r.granted && r.ticket.leaseExpiresAt !== null);
    const expiry = r.ticket.leaseExpiresAt;
    const waiter = await b.acquire(lane, PROJECT, "shared-queue-drill-waiter", HASH, { leaseSeconds: 60 });
    assert.ok(!waiter.granted && waiter.ticket.state === "queued" && waiter.ticket.position === 1);
    // From here on neither computer calls the lane until the parked await answers.
    const t0 = performance.now();
    const w = await b.awaitTicket(lane, waiter.ticket.ticketId, { waitSeconds: 60 });
    const parked = (performance.now() - t0) / 1000;
    assert.ok(w.granted && w.ticket.state === "held", `after ${parked} s: ${w.ticket.state}`);
    assert.ok(parked < 59, "the await answered only at its limit: not woken by the alarm");
    const late = (w.ticket.heldAt ?? 0) - expiry;
    assert.ok(late >= 0 && late <= MAX_PROMOTION_LATENESS, `promoted ${late} s after the expiry`);
    t6.diagnostic(`the alarm promoted the waiter ${(late * 1000).toFixed(1)} ms after the expiry`);
    const hb = await a.heartbeat(lane, r.ticket.ticketId);
    assert.ok(!hb.refreshed && hb.reason === "expired" && hb.state === "expired");
    const lateRelease = await a.release(lane, r.ticket.ticketId, { outcome: "lease-lost" });
    assert.ok(!lateRelease.released && lateRelease.reason === "expired" && lateRelease.outcome === "expired");
    assert.ok((await b.release(lane, waiter.ticket.ticketId, { outcome: "completed" })).released);
  });

  await t.test("every drill ticket is released", async () => {
    const st = await a.status(lane);
    assert.deepEqual([st.held.length, st.queued.length, st.inFlight.length], [0, 0, 0]);
  });
});

test("an in-flight hold keeps the slot after a lease-lost release; reconcile frees it", async () => {
  const lane = `drill:ts-in-flight-${RUN}`;
  const a = computer("ts-studio-a");
  const b = computer("ts-studio-b");
  const held = await a.acquire(lane, PROJECT, "in-flight-a", HASH, { leaseSeconds: 60 });
  assert.ok(held.granted);
  const tid = held.ticket.ticketId;
  let waiter: LaneReply = await b.acquire(lane, PROJECT, "in-flight-b", HASH, { leaseSeconds: 60 });
  assert.equal(waiter.ticket.state, "queued");
  const submitted = await a.receipt(lane, tid, "provider-submitted", { providerJobId: "sim-1", attempt: 1 });
  assert.ok(submitted.stored && submitted.contentHashVerified === true);
  const rel = await a.release(lane, tid, { outcome: "lease-lost", providerJobId: "sim-1" });
  assert.ok(rel.released && rel.outcome === "lease-lost");
  assert.deepEqual(rel.promoted, [], "the waiter was promoted onto a slot the provider job may hold");
  const st = await b.status(lane);
  assert.deepEqual(st.held, []);
  assert.deepEqual(st.queued.map((x) => x.ticketId), [waiter.ticket.ticketId]);
  const [job] = st.inFlight;
  assert.ok(job !== undefined && job.ticketId === tid && job.machineId === "ts-studio-a");
  assert.ok(job.holdUntil > job.submittedAt && job.since >= job.submittedAt);
  waiter = await b.awaitTicket(lane, waiter.ticket.ticketId, { waitSeconds: 1 });
  assert.equal(waiter.ticket.state, "queued", "promoted while the hold lasts");
  const rec = await a.reconcile(lane, tid, "completed", { providerJobId: "sim-1", note: "seen in the provider's dashboard" });
  assert.ok(rec.reconciled);
  assert.deepEqual(rec.promoted, [waiter.ticket.ticketId]);
  waiter = await waitForGrant(b, waiter, { maxWaitSeconds: 10 });
  assert.ok(waiter.granted && waiter.ticket.state === "held");
  const twice = await failure(a.reconcile(lane, tid, "completed"));
  assert.ok(twice instanceof NotInFlightError && twice.status === 409, twice.toString());
  const unknown = await failure(a.reconcile(lane, "t_no-such-ticket-0000000000000000000000", "failed"));
  assert.ok(unknown instanceof NotFoundError && unknown.status === 404, unknown.toString());
  assert.ok((await b.release(lane, waiter.ticket.ticketId, { outcome: "completed" })).released);
  assert.deepEqual((await a.status(lane)).inFlight, []);
});

test("cooldown pauses the lane from a held ticket; others queue with the pause attached", async () => {
  const lane = `drill:ts-cooldown-${RUN}`;
  const a = computer("ts-studio-a");
  const b = computer("ts-studio-b");
  const held = await a.acquire(lane, PROJECT, "cooldown-a", HASH, { leaseSeconds: 60 });
  const queued = await b.acquire(lane, PROJECT, "cooldown-b", HASH, { leaseSeconds: 60 });
  const notHeld = await failure(b.cooldown(lane, queued.ticket.ticketId, 30));
  assert.ok(notHeld instanceof TicketNotHeldError && notHeld.status === 409, notHeld.toString());
  const c = await a.cooldown(lane, held.ticket.ticketId, 30);
  assert.ok(c.paused && c.pause !== null && c.pause.reasonCode === "provider-human-check");
  assert.ok(c.pause.until - c.pause.startedAt >= 29.9 && c.pause.machineId === "ts-studio-a");
  assert.ok((await a.release(lane, held.ticket.ticketId, { outcome: "not-submitted" })).released);
  const w = await b.awaitTicket(lane, queued.ticket.ticketId, { waitSeconds: 1 });
  assert.ok(w.ticket.state === "queued" && w.pause !== null, "promoted during the pause");
  assert.ok((w.ticket.etaSeconds ?? 0) >= 25, `the ETA ${w.ticket.etaSeconds} ignores the pause`);
  assert.ok((await b.release(lane, queued.ticket.ticketId, { outcome: "abandoned" })).released);
});

test("every RFC 8785 vector as a receipt payload: the coordinator verifies the client's hash", async () => {
  const lane = `drill:ts-receipts-${RUN}`;
  const a = computer("ts-studio-a");
  const held = await a.acquire(lane, PROJECT, "receipts", HASH, { leaseSeconds: 60 });
  const vectors = join(REPO, "tests", "data", "jcs_vectors", "input");
  for (const name of readdirSync(vectors).filter((n) => n.endsWith(".json"))) {
    const parsed = jsonValue(JSON.parse(readFileSync(join(vectors, name), "utf8")), name);
    const payload =
      typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? jsonObject(parsed, name) : { v: parsed };
    const r = await a.receipt(lane, held.ticket.ticketId, "references-applied", payload);
    assert.ok(r.stored && r.contentHashVerified === true, `${name}: ${JSON.stringify(r)}`);
  }
  const mismatch = await a.receipt(lane, held.ticket.ticketId, "provider-terminal", { x: 1 }, { contentHash: `sha256:${"0".repeat(64)}` });
  assert.ok(mismatch.stored && mismatch.contentHashVerified === false, "a wrong hash is stored and flagged");
  assert.ok((await a.release(lane, held.ticket.ticketId, { outcome: "completed" })).released);
});
