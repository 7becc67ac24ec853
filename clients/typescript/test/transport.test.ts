// Fail-closed and retries (docs/client.md#typescript): every cause of LANE_REQUIRED=1 is a
// PreProviderError, which errors are retried and which are not, and that no message carries
// the token — against small loopback servers that misbehave on purpose (test/kit.ts).
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  ConfigError,
  CoordinatorTimeoutError,
  CoordinatorUnreachableError,
  LaneClient,
  type LaneClientOptions,
  LaneClientError,
  MalformedReplyError,
  NO_RETRY,
  NotFoundError,
  PreProviderError,
  UnauthorizedError,
  UnavailableError,
  retryDelay,
  DEFAULT_RETRY,
} from "lane-coordinator-client";
import { fakeServer, json, refusedPort, silentServer, statusBody } from "./kit.js";

const SECRET = "s3cret-token-that-must-never-appear-0123456789";
const LANE = "render:main";

function client(url: string, extra: Partial<LaneClientOptions> = {}): LaneClient {
  return new LaneClient({ url, token: SECRET, machineId: "studio-a", claimId: "c1", timeoutSeconds: 1, ...extra });
}

function clean(err: unknown): LaneClientError {
  assert.ok(err instanceof LaneClientError, `not a LaneClientError: ${String(err)}`);
  const text = `${err.message} ${err.toString()} ${err.stack ?? ""} ${JSON.stringify(err)}`;
  assert.ok(!text.includes(SECRET), "the token appears in the error");
  return err;
}

async function preProvider(call: Promise<unknown>, needle: string): Promise<PreProviderError> {
  try {
    await call;
  } catch (err) {
    const e = clean(err);
    assert.ok(e instanceof PreProviderError, `expected PreProviderError, got ${e.toString()}`);
    assert.ok(e.cause.includes(needle), `${JSON.stringify(needle)} not in ${JSON.stringify(e.cause)}`);
    assert.equal(e.code, "pre-provider");
    return e;
  }
  assert.fail("no error");
}

async function rejects(call: Promise<unknown>): Promise<LaneClientError> {
  try {
    await call;
  } catch (err) {
    return clean(err);
  }
  assert.fail("no error");
}

test("a silent socket times out: pre-provider when required, CoordinatorTimeoutError when not", async () => {
  const silent = await silentServer();
  try {
    const t0 = performance.now();
    const e = await preProvider(client(silent.url, { required: true, timeoutSeconds: 0.5 }).status(LANE), "timeout");
    assert.ok(e.underlying instanceof CoordinatorTimeoutError);
    assert.ok(performance.now() - t0 < 5000);
    // await has its own timeout: waitSeconds + the per-call timeout
    const t1 = performance.now();
    const w = await preProvider(
      client(silent.url, { required: true, timeoutSeconds: 0.5 }).awaitTicket(LANE, "t_x", { waitSeconds: 1 }),
      "within 1.5 s",
    );
    assert.ok(performance.now() - t1 >= 1400, "await gave up before waitSeconds + timeout");
    assert.ok(w.underlying instanceof CoordinatorTimeoutError);
    const loose = await rejects(client(silent.url, { timeoutSeconds: 0.5 }).status(LANE));
    assert.ok(loose instanceof CoordinatorTimeoutError && !(loose instanceof PreProviderError));
  } finally {
    await silent.close();
  }
});

test("connection refused is retried until the timeout, then unreachable", async () => {
  const port = await refusedPort();
  const url = `http://127.0.0.1:${port}`;
  const t0 = performance.now();
  const e = await preProvider(client(url, { required: true, timeoutSeconds: 1 }).status(LANE), "unreachable");
  const took = performance.now() - t0;
  assert.ok(e.underlying instanceof CoordinatorUnreachableError);
  assert.match(e.cause, /ECONNREFUSED/);
  assert.match(e.cause, /\(\d+ attempts in [\d.]+ s\)/); // retried within the call's timeout
  assert.ok(took >= 500 && took < 3000, `took ${took} ms`);
  const once = await rejects(client(url, { retry: NO_RETRY }).acquire(LANE, "p", "s", "h"));
  assert.ok(once instanceof CoordinatorUnreachableError);
  assert.doesNotMatch(once.message, /attempts/);
});

test("a 503 unavailable is retried and the next answer is used", async () => {
  const fake = await fakeServer((_req, res, n) =>
    n < 3
      ? json(res, 503, { coordinator: "actor-sqlite", error: { code: "unavailable", message: "store down" } })
      : json(res, 200, statusBody("actor-sqlite")),
  );
  try {
    const st = await client(fake.url, { required: true, timeoutSeconds: 5 }).status(LANE);
    assert.equal(st.coordinator, "actor-sqlite");
    assert.equal(fake.requests, 3);
  } finally {
    await fake.close();
  }
});

test("a connection dropped before the reply is retried", async () => {
  const fake = await fakeServer((req, res, n) => {
    if (n === 1) req.socket.destroy(); // the request arrived; no reply
    else json(res, 200, statusBody("actor-postgres"));
  });
  try {
    const lane = client(fake.url, { required: true, timeoutSeconds: 5 });
    const st = await lane.status(LANE);
    assert.equal(st.coordinator, "actor-postgres"); // replicas on PostgreSQL are shared too
    assert.equal(lane.kind, "actor-postgres");
    assert.equal(fake.requests, 2);
  } finally {
    await fake.close();
  }
});

test("a release whose first reply was lost reads as released when the repeat finds it done", async () => {
  const fake = await fakeServer((req, res, n, body) => {
    if (n === 1) {
      req.socket.destroy(); // applied, reply lost
      return;
    }
    const sent: unknown = JSON.parse(body);
    const outcome = typeof sent === "object" && sent !== null && "outcome" in sent ? sent.outcome : null;
    json(res, 200, { coordinator: "actor-sqlite", released: false, state: "done", outcome, promoted: [], reason: "already-done" });
  });
  try {
    const r = await client(fake.url, { timeoutSeconds: 5 }).release(LANE, "t_1", { outcome: "completed" });
    assert.deepEqual(r, { coordinator: "actor-sqlite", released: true, state: "done", outcome: "completed", promoted: [], reason: null });
  } finally {
    await fake.close();
  }
});

test("4xx answers are never retried; each code keeps its class", async () => {
  const fake = await fakeServer((_req, res) =>
    json(res, 404, { coordinator: "actor-sqlite", error: { code: "not-found", message: "no such ticket" } }),
  );
  try {
    const required = await rejects(client(fake.url, { required: true }).heartbeat(LANE, "t_x"));
    assert.ok(required instanceof NotFoundError && !(required instanceof PreProviderError));
    assert.equal(required.status, 404);
    assert.equal(fake.requests, 1);
  } finally {
    await fake.close();
  }
});

const FAKES: [string, (res: import("node:http").ServerResponse) => void, string, new (...a: never[]) => LaneClientError][] = [
  ["401", (res) => json(res, 401, { coordinator: "actor-sqlite", error: { code: "unauthorized", message: "bad token" } }), "unauthorized (HTTP 401)", UnauthorizedError],
  ["not JSON", (res) => { res.writeHead(200, { "Content-Type": "text/html" }); res.end("<html>proxy</html>"); }, "not JSON", MalformedReplyError],
  ["a proxy's 403", (res) => json(res, 403, { message: "forbidden" }), "HTTP 403", MalformedReplyError],
  ["a 502", (res) => json(res, 502, { coordinator: "actor-sqlite", error: { code: "bad-gateway", message: "upstream" } }), "HTTP 502", LaneClientError],
  ["a redirect", (res) => { res.writeHead(302, { Location: "/elsewhere", "Content-Type": "application/json" }); res.end("{}"); }, "HTTP 302", MalformedReplyError],
  ["another shape", (res) => json(res, 200, { coordinator: "actor-sqlite", lane: LANE }), "does not match the protocol", MalformedReplyError],
  ["an unknown state", (res) => json(res, 200, { ...statusBody("actor-sqlite"), held: [{ ticketId: "t" }] }), "held[0]", MalformedReplyError],
];

for (const [what, answer, needle, loose] of FAKES) {
  test(`${what}: pre-provider when required, ${loose.name} when not`, async () => {
    const fake = await fakeServer((_req, res) => answer(res));
    try {
      await preProvider(client(fake.url, { required: true }).status(LANE), needle);
      const e = await rejects(client(fake.url).status(LANE));
      assert.ok(e instanceof loose && !(e instanceof PreProviderError), e.toString());
    } finally {
      await fake.close();
    }
  });
}

test("a coordinator that is not shared is refused when required, answered when not", async () => {
  const fake = await fakeServer((_req, res) => json(res, 200, statusBody("local-sqlite")));
  try {
    await preProvider(
      client(fake.url, { required: true }).status(LANE),
      'reports coordinator="local-sqlite", not one of actor-sqlite, actor-postgres',
    );
    const st = await client(fake.url).status(LANE);
    assert.equal(st.coordinator, "local-sqlite");
  } finally {
    await fake.close();
  }
});

test("missing or invalid configuration: PreProviderError when required, ConfigError when not", () => {
  const cases: [Partial<LaneClientOptions>, string][] = [
    [{ url: "" }, "LANE_COORDINATOR_URL"],
    [{ url: "http://user:pw@127.0.0.1:8787" }, "user:password"],
    [{ url: "http://127.0.0.1:99999" }, "not a valid URL"],
    [{ url: "http://[::1" }, "not a valid URL"],
    [{ url: "ftp://127.0.0.1:8787" }, "http://"],
    [{ token: "" }, "LANE_TOKEN"],
    [{ machineId: "" }, "LANE_MACHINE_ID"],
    [{ machineId: "has space" }, "LANE_MACHINE_ID (must be"],
  ];
  for (const [extra, needle] of cases) {
    const options = { url: "http://127.0.0.1:9", token: SECRET, machineId: "studio-a", ...extra };
    assert.throws(() => new LaneClient({ ...options, required: true }), (err: unknown) => {
      assert.ok(err instanceof PreProviderError && err.cause.includes(needle), String(err));
      assert.ok(!err.cause.includes("pw@"));
      return true;
    });
    assert.throws(() => new LaneClient(options), (err: unknown) => err instanceof ConfigError && err.code === "config");
  }
});

test("the backoff doubles from 0.05 s to at most 1 s, with jitter in [d/2, d]", () => {
  for (const [retry, full] of [[1, 0.05], [2, 0.1], [3, 0.2], [5, 0.8], [6, 1], [40, 1]] as const) {
    for (let i = 0; i < 50; i++) {
      const d = retryDelay(DEFAULT_RETRY, retry);
      assert.ok(d >= full / 2 && d <= full, `retry ${retry}: ${d}`);
    }
  }
});

test("UnavailableError is what a 503 leaves after the retries when not required", async () => {
  const fake = await fakeServer((_req, res) =>
    json(res, 503, { coordinator: "actor-sqlite", error: { code: "unavailable", message: "at max_lanes" } }),
  );
  try {
    const e = await rejects(client(fake.url, { timeoutSeconds: 0.6 }).status(LANE));
    assert.ok(e instanceof UnavailableError, e.toString());
    assert.match(e.message, /attempts in/);
    assert.ok(fake.requests >= 2, `${fake.requests} requests`);
  } finally {
    await fake.close();
  }
});
