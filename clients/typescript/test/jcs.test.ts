// RFC 8785 canonical JSON and receipt hashes against the repository's reference vectors
// (tests/data/jcs_vectors, the same files the coordinator's own tests use).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  BadRequestError,
  type JsonValue,
  canonicalJson,
  contentHash,
  jsonValue,
  receiptIdFor,
} from "lane-coordinator-client";
import { REPO } from "./kit.js";

const VECTORS = join(REPO, "tests", "data", "jcs_vectors");

function parse(text: string): JsonValue {
  const parsed: unknown = JSON.parse(text);
  return jsonValue(parsed, "vector");
}

test("every reference vector canonicalizes to its expected bytes", () => {
  const names = readdirSync(join(VECTORS, "input")).filter((n) => n.endsWith(".json"));
  assert.ok(names.length >= 6, `only ${names.length} vectors`);
  for (const name of names) {
    const input = parse(readFileSync(join(VECTORS, "input", name), "utf8"));
    const expected = readFileSync(join(VECTORS, "output", name));
    const out = Buffer.from(canonicalJson(input), "utf8");
    assert.deepEqual(out, expected, `${name}: ${out.toString()} != ${expected.toString()}`);
    const hex = createHash("sha256").update(expected).digest("hex");
    assert.equal(contentHash(input), `sha256:${hex}`, name);
  }
});

test("numbers take the ECMAScript form; keys sort by UTF-16 code unit", () => {
  assert.equal(canonicalJson({ b: [1e21, 1e-7, -0, 0.1, 100, 2 ** 53] }), '{"b":[1e+21,1e-7,0,0.1,100,9007199254740992]}');
  // U+1F600 (a surrogate pair, 0xD83D…) sorts before U+FB33 by code unit, after it by code point
  assert.equal(canonicalJson({ "\ufb33": 1, "\u{1f600}": 2 }), '{"\u{1f600}":2,"\ufb33":1}');
  assert.equal(canonicalJson({ a: "\u000f\n\"\\/" }), '{"a":"\\u000f\\n\\"\\\\/"}');
});

test("what has no canonical form is a BadRequestError before anything is sent", () => {
  const deep = (n: number): JsonValue => (n === 0 ? 1 : [deep(n - 1)]);
  const cases: [JsonValue, string][] = [
    [{ n: Number.NaN }, "not finite"],
    [{ n: [Number.POSITIVE_INFINITY] }, "not finite"],
    [{ s: "\ud800" }, "lone surrogate"],
    [{ ["\udc00"]: 1 }, "lone surrogate"],
    [{ d: deep(32) }, "nested deeper than 32 levels"],
  ];
  for (const [value, needle] of cases) {
    assert.throws(() => canonicalJson(value), (err: unknown) => {
      assert.ok(err instanceof BadRequestError, String(err));
      assert.equal(err.code, "bad-request");
      assert.ok(err.message.includes(needle), err.message);
      return true;
    });
  }
  assert.doesNotThrow(() => canonicalJson({ d: deep(31) })); // 32 levels: the bound itself
});

test("receiptId is <ticketId>:<phase>:<first 16 hex of the hash>", () => {
  const hash = contentHash({ refs: 3 });
  assert.match(hash, /^sha256:[0-9a-f]{64}$/);
  assert.equal(receiptIdFor("t_abc:d", "lease-acquired", hash), `t_abc:d:lease-acquired:${hash.slice(7, 23)}`);
});
