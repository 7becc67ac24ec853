// The HTTP transport under LaneClient (src/client.ts): one call with its timeout and its
// retries, every failure mapped to a client error (and, with `required`, to PreProviderError),
// the reply's coordinator kind checked — the rules of the Python client's client/transport.py
// (docs/client.md#retries, docs/client.md#fail-closed-lane_required1).
//
// Retries: an attempt that fails at the connection level (refused, reset, the server closed
// the connection before its reply, a reply cut short) or is answered 503 `unavailable` is
// sent again after an exponential backoff with jitter, while the call's own timeout leaves
// time for another attempt; then the last attempt's error is raised exactly as without
// retries. Every lane call is safe to repeat (the coordinator deduplicates by identity,
// ticket or receiptId); no 4xx answer and no other failure is ever retried.
import {
  ConfigError,
  CoordinatorTimeoutError,
  CoordinatorUnreachableError,
  LaneClientError,
  MalformedReplyError,
  PreProviderError,
  UnsupportedProtocolError,
  errorFor,
} from "./errors.js";
import { DecodeError, SHARED_KINDS, fields } from "./decode.js";
import { VERSION } from "./version.js";

// ---- retries: every default once, with its unit (the Python client's values) --------------
export const RETRY_FIRST_DELAY_SECONDS = 0.05; // the pause before the first retry; then doubles
export const RETRY_MAX_DELAY_SECONDS = 1.0; // no pause between two attempts is longer
export const RETRY_JITTER_FRACTION = 0.5; // each pause is drawn from [(1 - this) × d, d]
export const RETRY_MIN_ATTEMPT_SECONDS = 0.2; // a retry is sent only with this much time left
export const MIN_AWAIT_SECONDS = 1.0; // the protocol's smallest waitSeconds

/** How a failed call is retried: the n-th retry waits a random time in
 * [(1 - RETRY_JITTER_FRACTION) × d, d], d = min(maxDelaySeconds, firstDelaySeconds × 2^(n-1)),
 * shortened to leave RETRY_MIN_ATTEMPT_SECONDS of the call's timeout (no retry when less is
 * left). `maxAttempts` bounds the attempts (0: only the timeout does; 1: never retry). */
export interface RetryPolicy {
  readonly firstDelaySeconds: number;
  readonly maxDelaySeconds: number;
  readonly maxAttempts: number;
}

export const DEFAULT_RETRY: RetryPolicy = {
  firstDelaySeconds: RETRY_FIRST_DELAY_SECONDS,
  maxDelaySeconds: RETRY_MAX_DELAY_SECONDS,
  maxAttempts: 0,
};
export const NO_RETRY: RetryPolicy = { ...DEFAULT_RETRY, maxAttempts: 1 };

export function checkRetry(policy: RetryPolicy): RetryPolicy {
  if (!(policy.firstDelaySeconds > 0 && policy.firstDelaySeconds <= policy.maxDelaySeconds)) {
    throw new ConfigError(0, "retry: need 0 < firstDelaySeconds <= maxDelaySeconds");
  }
  if (!(Number.isInteger(policy.maxAttempts) && policy.maxAttempts >= 0)) {
    throw new ConfigError(0, "retry: maxAttempts must be 0 (unlimited) or more");
  }
  return policy;
}

/** The pause, in seconds, before retry number `retry` (1 = the first retry). */
export function retryDelay(policy: RetryPolicy, retry: number): number {
  const doublings = Math.min(Math.max(retry - 1, 0), 30);
  const full = Math.min(policy.maxDelaySeconds, policy.firstDelaySeconds * 2 ** doublings);
  return full * (1 - RETRY_JITTER_FRACTION * Math.random());
}

// ---- URLs ----------------------------------------------------------------------------------

/** The URL without any user:password part, query or fragment (never echo a credential). */
export function safeUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname === "/" ? "" : u.pathname}`;
  } catch {
    return "<invalid URL>";
  }
}

/** Why `url` cannot be the coordinator's base URL (undefined when it can). */
export function urlProblem(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return "not a valid URL";
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return "must start with http:// or https://";
  if (!u.hostname) return "no host name";
  if (u.username || u.password) return "must not carry user:password@ (the token goes in LANE_TOKEN)";
  return undefined;
}

// ---- one attempt ---------------------------------------------------------------------------

interface Exchange {
  status: number;
  text: string;
  contentType: string;
}

/** How an attempt without an answer failed. */
type Failure =
  | { kind: "timeout" }
  | { kind: "connect"; reason: string } // no connection: may work on the next try
  | { kind: "dropped"; reason: string } // after the request may have been sent
  | { kind: "final"; reason: string }; // DNS, TLS, anything else: not retried

const CONNECT_CODES = new Set(["ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL"]);
const DROPPED_CODES = new Set([
  "ECONNRESET",
  "EPIPE",
  "ECONNABORTED",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
  "UND_ERR_RES_CONTENT_LENGTH_MISMATCH",
]);

function errorCode(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null || !("code" in err)) return undefined;
  return typeof err.code === "string" ? err.code : undefined;
}

function classify(err: unknown): Failure {
  if (err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError")) {
    return { kind: "timeout" };
  }
  // fetch wraps the socket's error: TypeError("fetch failed", { cause }) — sometimes twice
  let inner: unknown = err;
  for (let i = 0; i < 3 && inner instanceof Error && errorCode(inner) === undefined; i++) {
    inner = inner.cause;
  }
  const code = errorCode(inner);
  const reason =
    code ?? (inner instanceof Error ? inner.message : err instanceof Error ? err.message : "error");
  if (code === "UND_ERR_CONNECT_TIMEOUT" || code === "UND_ERR_HEADERS_TIMEOUT") {
    return { kind: "timeout" };
  }
  if (code !== undefined && CONNECT_CODES.has(code)) return { kind: "connect", reason };
  if (code !== undefined && DROPPED_CODES.has(code)) return { kind: "dropped", reason };
  return { kind: "final", reason };
}

/** A 503 whose error body says `unavailable` (the coordinator's "nothing applied, retry"). */
function unavailable(ex: Exchange): boolean {
  if (ex.status !== 503) return false;
  try {
    const parsed: unknown = JSON.parse(ex.text);
    const error = fields(parsed, "reply").get("error");
    return fields(error, "error").get("code") === "unavailable";
  } catch {
    return false;
  }
}

const sleep = (seconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, seconds) * 1000));
const monotonic = (): number => performance.now() / 1000;

export interface TransportOptions {
  readonly url: string;
  readonly token: string;
  readonly timeoutSeconds: number;
  readonly required: boolean;
  readonly retry: RetryPolicy;
}

/** A call's successful answer: status, the parsed reply, and `resent` — an earlier attempt
 * failed after its request may have reached the coordinator (it may have been applied). */
export interface Answer {
  status: number;
  data: unknown;
  resent: boolean;
}

export class Transport {
  readonly url: string;
  readonly #token: string;
  readonly timeoutSeconds: number;
  readonly required: boolean;
  readonly retry: RetryPolicy;
  /** The kind of shared coordinator that answered last ("actor-sqlite" until then). */
  reportedKind: string | undefined;

  constructor(options: TransportOptions) {
    this.url = options.url;
    this.#token = options.token;
    this.timeoutSeconds = options.timeoutSeconds;
    this.required = options.required;
    this.retry = checkRetry(options.retry);
  }

  /** Under `required`, a failure that leaves the lane unconfirmed is pre-provider. */
  fail(err: LaneClientError): LaneClientError {
    if (!this.required || err instanceof PreProviderError) return err;
    const where = safeUrl(this.url);
    let cause: string | undefined;
    if (err instanceof CoordinatorTimeoutError) cause = `timeout: ${err.message}`;
    else if (err instanceof CoordinatorUnreachableError) cause = `unreachable: ${err.message}`;
    else if (err instanceof MalformedReplyError) cause = `malformed reply from ${where}: ${err.message}`;
    else if (err instanceof ConfigError) cause = err.message;
    else if (err.status === 401) {
      cause = `unauthorized (HTTP 401) at ${where}: the token was not accepted`;
    } else if (err.status === 403) cause = `forbidden (HTTP 403 ${err.code}) at ${where}: ${err.message}`;
    else if (err.status >= 500 || err instanceof UnsupportedProtocolError) {
      cause = `coordinator at ${where} answered HTTP ${err.status} ${err.code}: ${err.message}`;
    }
    return cause !== undefined ? new PreProviderError(cause, err) : err;
  }

  async #attempt(
    method: string,
    path: string,
    body: string | undefined,
    seconds: number,
  ): Promise<Exchange> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#token}`,
      Accept: "application/json",
      "User-Agent": `lane-client-ts/${VERSION}`,
    };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const signal = AbortSignal.timeout(Math.max(1, Math.round(seconds * 1000)));
    const init: RequestInit = { method, headers, redirect: "manual", signal };
    if (body !== undefined) init.body = body;
    const res = await fetch(this.url + path, init);
    const text = await res.text(); // the same signal bounds the body
    return { status: res.status, text, contentType: res.headers.get("content-type") ?? "" };
  }

  #pauseBefore(attempts: number, deadline: number, floor: number): number | undefined {
    if (this.retry.maxAttempts !== 0 && attempts >= this.retry.maxAttempts) return undefined;
    const spare = deadline - monotonic() - floor;
    return spare > 0 ? Math.min(retryDelay(this.retry, attempts), spare) : undefined;
  }

  /** One call, retried per `retry` within `timeoutSeconds` (default: the client's). With
   * `longPoll` (the body's waitSeconds) a retry asks for no longer a wait than what is left of
   * the call's timeout less its margin, so the retried poll is answered in time. */
  async request(
    method: "GET" | "POST",
    path: string,
    body?: Record<string, unknown>,
    options: { timeoutSeconds?: number; longPoll?: number } = {},
  ): Promise<Answer> {
    const total = options.timeoutSeconds ?? this.timeoutSeconds;
    const { longPoll } = options;
    const started = monotonic();
    const deadline = started + total;
    const what = `${method} ${path}`;
    const where = safeUrl(this.url);
    let floor = RETRY_MIN_ATTEMPT_SECONDS;
    if (longPoll !== undefined) floor += Math.min(longPoll, MIN_AWAIT_SECONDS);
    let attempts = 0;
    let resent = false;
    let last: { err?: LaneClientError; ex?: Exchange } | undefined; // the last retryable one
    let outcome: { err?: LaneClientError; ex?: Exchange };
    for (;;) {
      const left = deadline - monotonic();
      if (last !== undefined && left <= 0) {
        outcome = last; // the pause overran (a busy event loop)
        break;
      }
      attempts += 1;
      let sent = body;
      if (body !== undefined && longPoll !== undefined && attempts > 1) {
        const margin = total - longPoll;
        const wait = Math.max(Math.min(longPoll, MIN_AWAIT_SECONDS), Math.min(longPoll, left - margin));
        sent = { ...body, waitSeconds: Math.round(wait * 1000) / 1000 };
      }
      let retryable = false;
      let maybeApplied = false;
      try {
        const ex = await this.#attempt(
          method,
          path,
          sent === undefined ? undefined : JSON.stringify(sent),
          attempts === 1 ? total : left,
        );
        outcome = { ex };
        retryable = maybeApplied = unavailable(ex);
      } catch (err) {
        const failure = classify(err);
        if (failure.kind === "timeout") {
          if (last !== undefined) {
            // A retry that ran out of time: the answer is what the coordinator (or the
            // network) last said, as it would be without retries.
            outcome = last;
            break;
          }
          outcome = {
            err: new CoordinatorTimeoutError(0, `no answer from ${where} within ${total} s (${what})`),
          };
        } else if (failure.kind === "connect") {
          outcome = {
            err: new CoordinatorUnreachableError(0, `cannot connect to ${where} (${failure.reason}) (${what})`),
          };
          retryable = true;
        } else {
          outcome = {
            err: new CoordinatorUnreachableError(0, `${failure.reason} talking to ${where} (${what})`),
          };
          retryable = maybeApplied = failure.kind === "dropped";
        }
      }
      if (retryable) {
        resent ||= maybeApplied;
        last = outcome;
        const pause = this.#pauseBefore(attempts, deadline, floor);
        if (pause !== undefined) {
          await sleep(pause);
          continue;
        }
      }
      break;
    }
    const took = (monotonic() - started).toFixed(1);
    const withAttempts = (err: LaneClientError): LaneClientError => {
      if (attempts > 1) err.message = `${err.message} (${attempts} attempts in ${took} s)`;
      return err;
    };
    if (outcome.err !== undefined || outcome.ex === undefined) {
      throw this.fail(withAttempts(outcome.err ?? new CoordinatorUnreachableError(0, what)));
    }
    return { ...this.#decode(outcome.ex, what, withAttempts), resent };
  }

  /** The answer's JSON, or the client error it stands for. */
  #decode(
    ex: Exchange,
    what: string,
    withAttempts: (err: LaneClientError) => LaneClientError,
  ): { status: number; data: unknown } {
    let data: unknown;
    try {
      data = JSON.parse(ex.text);
    } catch {
      throw this.fail(
        new MalformedReplyError(
          ex.status,
          `${what}: HTTP ${ex.status} reply is not JSON (content type ${ex.contentType || "none"})`,
        ),
      );
    }
    const isObject = typeof data === "object" && data !== null && !Array.isArray(data);
    if (ex.status >= 400) {
      const error = isObject ? fields(data, "reply").get("error") : undefined;
      const detail = typeof error === "object" && error !== null ? fields(error, "error") : undefined;
      const code = detail?.get("code");
      if (typeof code === "string") {
        const message = detail?.get("message");
        const err = errorFor(code, ex.status, typeof message === "string" ? message : code);
        throw this.fail(withAttempts(err));
      }
      throw this.fail(new MalformedReplyError(ex.status, `${what}: HTTP ${ex.status} without an error body`));
    }
    if ((ex.status !== 200 && ex.status !== 201) || !isObject) {
      throw this.fail(
        new MalformedReplyError(
          ex.status,
          `${what}: expected a JSON object with HTTP 200/201, got HTTP ${ex.status}`,
        ),
      );
    }
    const reported = fields(data, "reply").get("coordinator");
    const shared = typeof reported === "string" && SHARED_KINDS.includes(reported);
    if (this.required && !shared) {
      throw new PreProviderError(
        `the coordinator at ${safeUrl(this.url)} reports coordinator=${JSON.stringify(reported) ?? "nothing"}, ` +
          `not one of ${SHARED_KINDS.join(", ")}: it is not the shared coordinator`,
      );
    }
    if (shared) this.reportedKind = reported;
    return { status: ex.status, data };
  }

  /** The reply decoded by `decode`; a reply of the wrong shape is a MalformedReplyError. */
  convert<T>(answer: Answer, decode: (v: unknown) => T, what: string): T {
    try {
      return decode(answer.data);
    } catch (err) {
      if (!(err instanceof DecodeError)) throw err;
      throw this.fail(
        new MalformedReplyError(answer.status, `${what}: reply does not match the protocol (${err.message})`),
      );
    }
  }
}
