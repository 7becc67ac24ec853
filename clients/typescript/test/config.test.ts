// Settings from the environment and the files `lane setup` writes, and connect(): the
// Python client's rules (client/config.py), and no local queue.
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import {
  ConfigError,
  type Environment,
  LaneClient,
  PreProviderError,
  connect,
  loadSettings,
} from "lane-coordinator-client";

const SECRET = "s3cret-token-that-must-never-appear-0123456789";

function scratch(): string {
  return mkdtempSync(join(tmpdir(), "lane-ts-config-"));
}

function env(extra: Environment = {}): Environment {
  return { LANE_CONFIG_DIR: scratch(), ...extra };
}

test("the environment names the coordinator, token, machine and timeout", () => {
  const e = env({
    LANE_COORDINATOR_URL: " http://127.0.0.1:8787/ ",
    LANE_TOKEN: SECRET,
    LANE_MACHINE_ID: "studio-a",
    LANE_TIMEOUT_SECONDS: "2.5",
    LANE_HUMAN_CHECK_COOLDOWN_SECONDS: "99999",
  });
  const s = loadSettings({ env: e });
  assert.equal(s.url, "http://127.0.0.1:8787");
  assert.equal(s.token, SECRET);
  assert.equal(s.tokenSource, "$LANE_TOKEN");
  assert.equal(s.machineId, "studio-a");
  assert.equal(s.timeoutSeconds, 2.5);
  assert.equal(s.humanCheckCooldownSeconds, 7200); // clamped to 30..7200
  assert.equal(s.required, false);
  const lane = connect(s);
  assert.ok(lane instanceof LaneClient);
  assert.equal(lane.timeoutSeconds, 2.5);
  assert.ok(!lane.toString().includes(SECRET) && !JSON.stringify(lane).includes(SECRET));
});

test("LANE_CLAIM is minted once per process and exported to children", () => {
  const e = env();
  const first = loadSettings({ env: e });
  assert.match(first.claimId ?? "", /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(e["LANE_CLAIM"], first.claimId);
  assert.equal(loadSettings({ env: e }).claimId, first.claimId);
  assert.equal(loadSettings({ env: env({ LANE_CLAIM: "render-7" }) }).claimId, "render-7");
  const e2 = env();
  assert.equal(loadSettings({ env: e2, mintClaim: false }).claimId, undefined);
  assert.equal(e2["LANE_CLAIM"], undefined);
});

test("LANE_REQUIRED: 0/false/no/off/empty are off, 1/true/yes/on on, anything else on", () => {
  for (const [raw, want] of [["1", true], ["yes", true], ["ON", true], ["0", false], ["off", false], ["", false], ["maybe", true]] as const) {
    const s = loadSettings({ env: env({ LANE_REQUIRED: raw }) });
    assert.equal(s.required, want, raw);
    assert.equal(s.warnings.some((w) => w.includes("fail closed")), raw === "maybe", raw);
  }
  assert.equal(loadSettings({ env: env() }).required, false);
});

test("client.env fills what the environment leaves unset; a loose file's token is ignored", () => {
  const dir = scratch();
  const path = join(dir, "client.env");
  writeFileSync(path, `# lane setup\nexport LANE_COORDINATOR_URL="http://127.0.0.1:9"\nLANE_MACHINE_ID=studio-b\nLANE_REQUIRED=1\nLANE_TOKEN=${SECRET}\n`);
  chmodSync(path, 0o600);
  const s = loadSettings({ env: { LANE_CONFIG_DIR: dir, LANE_MACHINE_ID: "" } });
  assert.equal(s.url, "http://127.0.0.1:9");
  assert.equal(s.machineId, "studio-b"); // an empty variable counts as unset
  assert.equal(s.required, true);
  assert.equal(s.token, SECRET);
  chmodSync(path, 0o644);
  const loose = loadSettings({ env: { LANE_CONFIG_DIR: dir } });
  assert.equal(loose.token, undefined);
  assert.ok(loose.warnings.some((w) => w.includes("ignoring LANE_TOKEN")));
});

test("the token file is read only when private (0600)", () => {
  const dir = scratch();
  const path = join(dir, "token");
  writeFileSync(path, `${SECRET}\n`);
  chmodSync(path, 0o600);
  const s = loadSettings({ env: { LANE_CONFIG_DIR: dir } });
  assert.equal(s.token, SECRET);
  assert.equal(s.tokenSource, path);
  chmodSync(path, 0o640);
  const refused = loadSettings({ env: { LANE_CONFIG_DIR: dir, LANE_COORDINATOR_URL: "http://127.0.0.1:9", LANE_MACHINE_ID: "m", LANE_REQUIRED: "1" } });
  assert.equal(refused.token, undefined);
  assert.match(refused.tokenProblem ?? "", /chmod 600/);
  assert.throws(() => connect(refused), (err: unknown) => err instanceof PreProviderError && err.cause.includes("chmod 600"));
});

test("no URL: never a local queue — PreProviderError when required, ConfigError when not", () => {
  assert.throws(
    () => connect(loadSettings({ env: env({ LANE_REQUIRED: "1" }) })),
    (err: unknown) =>
      err instanceof PreProviderError &&
      err.cause.includes("LANE_REQUIRED=1 but LANE_COORDINATOR_URL is unset") &&
      err.underlying === undefined,
  );
  assert.throws(
    () => connect(loadSettings({ env: env() })),
    (err: unknown) => err instanceof ConfigError && err.message.includes("no local queue"),
  );
});

test("a missing token or machine id is named", () => {
  const base = { LANE_COORDINATOR_URL: "http://127.0.0.1:9", LANE_REQUIRED: "1" };
  assert.throws(() => connect(loadSettings({ env: env({ ...base, LANE_MACHINE_ID: "m" }) })), (err: unknown) => err instanceof PreProviderError && err.cause.includes("LANE_TOKEN"));
  assert.throws(() => connect(loadSettings({ env: env({ ...base, LANE_TOKEN: SECRET }) })), (err: unknown) => err instanceof PreProviderError && err.cause.includes("LANE_MACHINE_ID") && !err.cause.includes(SECRET));
  assert.throws(() => connect(loadSettings({ env: env({ LANE_COORDINATOR_URL: "http://127.0.0.1:9", LANE_TOKEN: SECRET }) })), (err: unknown) => err instanceof ConfigError && !(err instanceof PreProviderError));
});
