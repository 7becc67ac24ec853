// Receipt hashing (docs/protocol.md#receipts): RFC 8785 (JCS) canonical JSON, its sha256 as
// `sha256:<64 hex>`, and the receiptId `<ticketId>:<phase>:<first 16 hex of the hash>` — what
// the coordinator recomputes to set `contentHashVerified`. JCS is JSON.stringify's own
// output for strings and numbers (ECMAScript's Number::toString is the form RFC 8785 names),
// with object keys sorted by UTF-16 code unit (what Array.prototype.sort does to strings).
import { createHash } from "node:crypto";

import { BadRequestError } from "./errors.js";

/** A JSON value as a receipt payload holds it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
/** A JSON object: a receipt payload. */
export type JsonObject = { [key: string]: JsonValue };

/** The coordinator's nesting bound (coordinator/protocol/constants.py MAX_JSON_DEPTH): the
 * payload object is level 1; deeper is a 400, refused here before anything is sent. */
export const MAX_JSON_DEPTH = 32;

const LONE_SURROGATE = /\p{Cs}/u; // in `u` mode a well-formed pair is one code point

function str(s: string): string {
  if (LONE_SURROGATE.test(s)) {
    throw new BadRequestError(0, "payload: a string holds a lone surrogate (not valid Unicode)");
  }
  return JSON.stringify(s);
}

function write(value: JsonValue, depth: number, out: string[]): void {
  if (value === null || typeof value === "boolean") {
    out.push(String(value));
  } else if (typeof value === "number") {
    if (!Number.isFinite(value)) {
      throw new BadRequestError(0, "payload: a number is not finite (RFC 8785 has no NaN/Infinity)");
    }
    out.push(JSON.stringify(value)); // -0 prints as 0, as RFC 8785 wants
  } else if (typeof value === "string") {
    out.push(str(value));
  } else {
    if (depth > MAX_JSON_DEPTH) {
      throw new BadRequestError(0, `payload: nested deeper than ${MAX_JSON_DEPTH} levels`);
    }
    if (Array.isArray(value)) {
      out.push("[");
      value.forEach((item, i) => {
        if (i > 0) out.push(",");
        write(item, depth + 1, out);
      });
      out.push("]");
    } else {
      out.push("{");
      let first = true;
      for (const key of Object.keys(value).sort()) {
        const item = value[key];
        if (item === undefined) continue; // not JSON (JSON.stringify drops it too)
        if (!first) out.push(",");
        first = false;
        out.push(str(key), ":");
        write(item, depth + 1, out);
      }
      out.push("}");
    }
  }
}

/** RFC 8785 canonical JSON of `value` (a BadRequestError when it has none: a number that is
 * not finite, a lone surrogate, nesting deeper than MAX_JSON_DEPTH). */
export function canonicalJson(value: JsonValue): string {
  const out: string[] = [];
  write(value, 1, out);
  return out.join("");
}

/** `sha256:<64 lowercase hex>` of the canonical JSON's UTF-8 bytes. */
export function contentHash(value: JsonValue): string {
  return "sha256:" + createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}

/** `<ticketId>:<phase>:<first 16 hex of the hash>`. */
export function receiptIdFor(ticketId: string, phase: string, hash: string): string {
  return `${ticketId}:${phase}:${hash.replace(/^sha256:/, "").slice(0, 16)}`;
}
