// Test helpers: the real coordinator the pytest side started (tests/typescript), the repo's
// paths, and small misbehaving HTTP servers on loopback for the failures a real coordinator
// does not produce on demand (the Python client's tests use the same kinds: tests/harness/fakes.py).
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import { type Socket, createServer as createTcpServer } from "node:net";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { LaneClient, type LaneClientOptions } from "lane-coordinator-client";

/** The nearest folder at or above this file that holds `marker`. */
function above(marker: string): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, marker))) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`no ${marker} above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
  return dir;
}

/** This package's folder (clients/typescript) and the repository's root. */
export const PACKAGE = above("package.json");
export const REPO = above(join("tests", "data", "jcs_vectors"));

/** The coordinator the pytest side started: LANE_COORDINATOR_URL and LANE_TOKEN. */
export function realServer(): { url: string; token: string } {
  const url = process.env["LANE_COORDINATOR_URL"];
  const token = process.env["LANE_TOKEN"];
  if (!url || !token) {
    throw new Error(
      "LANE_COORDINATOR_URL and LANE_TOKEN must name a running coordinator: run these tests " +
        "through `.venv/bin/pytest tests/typescript` (it starts one and runs npm test)",
    );
  }
  return { url, token };
}

/** A client of the real coordinator as machine `machineId`. */
export function computer(machineId: string, extra: Partial<LaneClientOptions> = {}): LaneClient {
  const { url, token } = realServer();
  return new LaneClient({ url, token, machineId, claimId: `${machineId}-${process.pid}`, required: true, ...extra });
}

export interface Fake {
  url: string;
  port: number;
  requests: number;
  close(): Promise<void>;
}

type Handler = (req: IncomingMessage, res: ServerResponse, n: number, body: string) => void;

/** An HTTP server on 127.0.0.1 answering every request with `handler` (n counts from 1). */
export async function fakeServer(handler: Handler): Promise<Fake> {
  const sockets = new Set<Socket>();
  const state = { requests: 0 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      state.requests += 1;
      handler(req, res, state.requests, Buffer.concat(chunks).toString("utf8"));
    });
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    get requests() {
      return state.requests;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

/** A TCP server that accepts connections and never answers. */
export async function silentServer(): Promise<Fake> {
  const sockets = new Set<Socket>();
  const server = createTcpServer((s) => {
    sockets.add(s);
    s.on("error", () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests: 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A loopback port nothing listens on (bound, then closed). */
export async function refusedPort(): Promise<number> {
  const fake = await silentServer();
  await fake.close();
  return fake.port;
}

/** A status reply as a coordinator of `kind` sends it. */
export function statusBody(kind: string, lane = "render:main"): Record<string, unknown> {
  return {
    coordinator: kind,
    lane,
    enforced: true,
    capacity: 1,
    held: [],
    queued: [],
    queuedTotal: 0,
    pause: null,
    now: 1764450000.123,
    inFlight: [],
  };
}
