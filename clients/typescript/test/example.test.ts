// The driver guide's TypeScript turn (examples/turn.ts, the same text as the guide's block:
// tests/typescript checks it) runs as written against the real coordinator, fail-closed.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";

import { PACKAGE, computer, realServer } from "./kit.js";

const EXAMPLE = join(PACKAGE, "build", "examples", "turn.js");

test("examples/turn.ts: a held ticket, three verified receipts, released completed", async () => {
  const { url, token } = realServer();
  const lane = `drill:ts-example-${process.pid}`;
  const env: Record<string, string | undefined> = { ...process.env };
  delete env["LANE_CLAIM"];
  Object.assign(env, {
    LANE_COORDINATOR_URL: url,
    LANE_TOKEN: token,
    LANE_MACHINE_ID: "ts-example",
    LANE_REQUIRED: "1",
    LANE_EXAMPLE_LANE: lane,
    LANE_CONFIG_DIR: join(PACKAGE, "build", "no-config"), // no client.env or token file
  });
  const { stdout } = await promisify(execFile)(process.execPath, [EXAMPLE], { env, timeout: 60_000 });
  const printed: unknown = JSON.parse(stdout);
  assert.ok(typeof printed === "object" && printed !== null && "ticketId" in printed);
  assert.deepEqual({ ...printed, ticketId: "" }, { ticketId: "", outcome: "completed", released: true });
  const st = await computer("ts-reader").status(lane, { includeReceipts: true });
  assert.deepEqual([st.held.length, st.queued.length], [0, 0]);
  const rows = st.recentReceipts ?? [];
  assert.deepEqual(rows.map((r) => r.phase).sort(), ["lease-acquired", "provider-submitted", "provider-terminal"]);
  assert.ok(rows.every((r) => r.contentHashVerified === true && r.machineId === "ts-example"));
  assert.ok(rows.every((r) => !JSON.stringify(r.payload).includes("lighthouse")), "the prompt was sent");
});
