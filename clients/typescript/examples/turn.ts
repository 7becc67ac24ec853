// One render window's turn on a lane: acquire → wait → heartbeat while holding → receipts →
// submit → release (docs/driver-guide.md#a-typescript-turn). Run it on a drill lane.
import { createHash } from "node:crypto";
import { connect, loadSettings, waitForGrant } from "lane-coordinator-client";

const provider = { // stands in for your provider's API
  submit: async (_prompt: string) => `job-${Date.now()}`,
  waitUntilDone: async (_jobId: string) => "completed" as const,
};
const LANE = process.env["LANE_EXAMPLE_LANE"] ?? "drill:example"; // never a production lane
const prompt = "a lighthouse at dusk"; // stays here: only its hash is sent
const promptHash = "sha256:" + createHash("sha256").update(prompt).digest("hex");
const dropped = (err: unknown) => console.error(`lane: receipt dropped: ${String(err)}`);

const lane = connect(loadSettings()); // LANE_COORDINATOR_URL, LANE_TOKEN, LANE_MACHINE_ID, ...
let r = await lane.acquire(LANE, "demo", "scene-1", promptHash, { leaseSeconds: 60 });
r = await waitForGrant(lane, r); // long-polls await while queued
if (!r.granted) throw new Error(`not granted: ${r.ticket.state}, owned by ${r.owner.machineId}`);
const ticketId = r.ticket.ticketId;
let refusals = 0; // three `refreshed: false` in a row: the lease is lost, never submit
const beat = setInterval(() => {
  lane.heartbeat(LANE, ticketId).then((hb) => (refusals = hb.refreshed ? 0 : refusals + 1), () => {});
}, 20_000); // a third of the lease; a network error is not a refusal
try {
  await lane.receipt(LANE, ticketId, "lease-acquired", { fence: r.ticket.fence }).catch(dropped);
  if (refusals >= 3) throw new Error("lease lost before the submit");
  const jobId = await provider.submit(prompt); // if this throws, the ticket is kept (reconcile)
  await lane.receipt(LANE, ticketId, "provider-submitted", { providerJobId: jobId }).catch(dropped);
  const outcome = await provider.waitUntilDone(jobId);
  await lane.receipt(LANE, ticketId, "provider-terminal", { providerJobId: jobId, outcome }).catch(dropped);
  const done = await lane.release(LANE, ticketId, { outcome, providerJobId: jobId });
  console.log(JSON.stringify({ ticketId, outcome, released: done.released }));
} finally {
  clearInterval(beat);
}
