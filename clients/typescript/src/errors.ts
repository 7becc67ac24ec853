// Client errors: one class per protocol error code (docs/protocol.md#errors), the transport's
// own failures, and the fail-closed one — the same classes, codes and rules as the Python
// client's client/errors.py. No message carries the token.

/** A lane call failed. `code` is the protocol's error code (or a client-side one), `status`
 * the HTTP status (0 when there was no HTTP answer). */
export class LaneClientError extends Error {
  static readonly defaultCode: string = "error";
  readonly code: string;
  readonly status: number;

  constructor(code: string, status: number, message: string) {
    super(message || code);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
  }

  override toString(): string {
    return `${this.status ? `HTTP ${this.status} ` : ""}${this.code}: ${this.message}`;
  }
}

/** A class of LaneClientError for one code: `new NotOwnerError(status, message)`. */
export interface CodedErrorClass {
  new (status: number, message: string): LaneClientError;
  readonly defaultCode: string;
}

function coded(code: string): CodedErrorClass {
  return class extends LaneClientError {
    static override readonly defaultCode = code;
    constructor(status: number, message: string) {
      super(code, status, message);
    }
  };
}

// ---- error codes (docs/protocol.md#errors) ------------------------------------------------
export class BadRequestError extends coded("bad-request") {}
export class UnsupportedProtocolError extends coded("unsupported-protocol") {}
export class UnauthorizedError extends coded("unauthorized") {}
export class NotOwnerError extends coded("not-owner") {}
export class NotHolderError extends coded("not-holder") {}
export class RoleForbiddenError extends coded("role-forbidden") {}
export class MachineMismatchError extends coded("machine-mismatch") {}
export class NotFoundError extends coded("not-found") {}
export class TicketNotHeldError extends coded("ticket-not-held") {}
export class ReceiptConflictError extends coded("receipt-conflict") {}
/** reconcile: the ticket holds no in-flight slot (docs/protocol.md#reconcile). */
export class NotInFlightError extends coded("not-in-flight") {}
export class MethodNotAllowedError extends coded("method-not-allowed") {}
export class PayloadTooLargeError extends coded("payload-too-large") {}
export class UnsupportedMediaTypeError extends coded("unsupported-media-type") {}
export class UnavailableError extends coded("unavailable") {}

// ---- client-side failures -----------------------------------------------------------------
/** No HTTP answer: connection refused, DNS, TLS, reset. */
export class CoordinatorUnreachableError extends coded("unreachable") {}
/** No answer within the call's timeout. */
export class CoordinatorTimeoutError extends coded("timeout") {}
/** The answer is not JSON, not the shape the protocol fixes, or has an unexpected status. */
export class MalformedReplyError extends coded("malformed-reply") {}
/** Client configuration is missing or unusable (URL, token, machine id). */
export class ConfigError extends coded("config") {}

/** Fail closed (LANE_REQUIRED=1): the lane could not be confirmed, so nothing may be submitted
 * to the provider. `cause` names why; `underlying` is the error it replaced (undefined for
 * missing configuration). The Python CLI's exit code 3. */
export class PreProviderError extends LaneClientError {
  static override readonly defaultCode = "pre-provider";
  override readonly cause: string;
  readonly underlying: LaneClientError | undefined;

  constructor(cause: string, underlying?: LaneClientError) {
    super("pre-provider", underlying?.status ?? 0, cause);
    this.cause = cause;
    this.underlying = underlying;
  }

  override toString(): string {
    return `pre-provider error (fail-closed, nothing was submitted): ${this.cause}`;
  }
}

const BY_CODE: ReadonlyMap<string, CodedErrorClass> = new Map(
    [
      BadRequestError,
      UnsupportedProtocolError,
      UnauthorizedError,
      NotOwnerError,
      NotHolderError,
      RoleForbiddenError,
      MachineMismatchError,
      NotFoundError,
      TicketNotHeldError,
      ReceiptConflictError,
      NotInFlightError,
      MethodNotAllowedError,
      PayloadTooLargeError,
      UnsupportedMediaTypeError,
      UnavailableError,
    ].map((cls) => [cls.defaultCode, cls]),
  );

/** The client error for a protocol error code (an unknown code keeps the base class). */
export function errorFor(code: string, status: number, message: string): LaneClientError {
  const cls = BY_CODE.get(code);
  return cls !== undefined ? new cls(status, message) : new LaneClientError(code, status, message);
}

/** A failure that says nothing about the lane (no answer, a 5xx): worth trying again later. */
export function isTransient(err: LaneClientError): boolean {
  const inner = err instanceof PreProviderError ? err.underlying : err;
  if (inner === undefined) return false;
  if (
    inner instanceof CoordinatorUnreachableError ||
    inner instanceof CoordinatorTimeoutError ||
    inner instanceof UnavailableError
  ) {
    return true;
  }
  return inner instanceof MalformedReplyError && inner.status >= 500;
}
