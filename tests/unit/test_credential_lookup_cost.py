"""Presenting a token costs the same whatever the token file holds (docs/protocol.md#credentials):
1 line or 1,000, a token that shares all but its last character with a real one, a random one,
the right one.

What is measurable here, and what is not. A test on a shared 2-core machine cannot resolve the
few nanoseconds an early-exit byte comparison leaks per matching byte: that leak is closed by
construction (the presented token is hashed before anything is compared, so a prefix of a token
is no prefix of its digest, and digests are compared with hmac.compare_digest). What it can
resolve reliably is work that grows with the number of lines: a comparison per line over 1,000
lines costs tens of microseconds against about one for a hash and a dict lookup. So the test
compares the cost of each case relatively, never against a wall-clock target (speed targets
live in `make bench`):

- each case is timed in many short rounds, interleaved, and its per-call cost is the fastest
  round's (load on the machine only ever adds time, so the minimum is what the code costs);
- the spread (slowest case / fastest case) must stay under SPREAD_BOUND, a generous factor;
- the same measurement is run on a reference that compares the digest with every line in turn
  (what a linear `compare_digest` over the file does) and must see its spread far above the
  bound: the test shows, on this machine and at this moment, that it would fail such an
  implementation.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable

from coordinator.credentials import Credentials, Role, hashed_line, parse_credentials
from tests.harness import new_token

LINES = 1000
ROUNDS = 15
CALLS = 200  # per round and case: about 0.2 ms a round for the real lookup
SPREAD_BOUND = 3.0  # measured about 1.1-1.3 on an idle machine


def _file(tokens: list[str]) -> Credentials:
    lines = [hashed_line(t, f"c{i}", Role.DRIVER, None) for i, t in enumerate(tokens)]
    return Credentials(parse_credentials("\n".join(lines), source="t"))


def _cost(cases: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Per-call seconds of each case: the fastest of ROUNDS interleaved rounds."""
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(ROUNDS):
        for name, call in cases.items():
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[name] = min(best[name], (time.perf_counter() - start) / calls)
    return best


def _presenting(creds: Credentials, presented: bytes) -> Callable[[], object]:
    return lambda: creds.authenticate(presented)


def _spread(cost: dict[str, float]) -> float:
    return max(cost.values()) / min(cost.values())


def _tokens() -> tuple[list[str], str, str, str]:
    """1,000 tokens, the one every case looks for (the last line: the worst place for a scan),
    a wrong token sharing all but its last character with it, and a random wrong one."""
    tokens = [new_token() for _ in range(LINES)]
    right = tokens[-1]
    prefix = right[:-1] + ("A" if right[-1] != "A" else "B")
    return tokens, right, prefix, new_token()


def test_the_lookup_costs_the_same_for_1_or_1000_lines_and_any_prefix() -> None:
    tokens, right, prefix, wrong = _tokens()
    one, many = _file([right]), _file(tokens)
    assert one.authenticate(right.encode()) is not None
    assert many.authenticate(right.encode()) is not None
    assert many.authenticate(prefix.encode()) is None
    cases: dict[str, Callable[[], object]] = {}
    for label, creds in (("1 line", one), (f"{LINES} lines", many)):
        for what, token in (("right", right), ("prefix", prefix), ("wrong", wrong)):
            cases[f"{label}, {what}"] = _presenting(creds, token.encode())
    cost = _cost(cases, CALLS)
    shown = {k: f"{v * 1e6:.2f} us" for k, v in cost.items()}
    assert _spread(cost) < SPREAD_BOUND, shown


def _linear(digests: list[bytes]) -> Callable[[bytes], bool]:
    """The reference to fail: the presented token's digest compared with every line."""

    def check(presented: bytes) -> bool:
        digest = hashlib.sha256(presented).digest()
        ok = False
        for d in digests:
            ok |= hmac.compare_digest(digest, d)
        return ok

    return check


def test_the_same_measurement_fails_a_linear_scan() -> None:
    """The measurement is honest: a scan over 1,000 lines shows far above the bound."""
    tokens, right, prefix, wrong = _tokens()

    def digests(ts: list[str]) -> list[bytes]:
        return [hashlib.sha256(t.encode()).digest() for t in ts]

    one, many = _linear(digests([right])), _linear(digests(tokens))
    assert one(right.encode()) and many(right.encode()) and not many(prefix.encode())
    cases: dict[str, Callable[[], object]] = {
        "1 line": lambda: one(wrong.encode()),
        f"{LINES} lines": lambda: many(wrong.encode()),
    }
    cost = _cost(cases, CALLS // 10)
    shown = {k: f"{v * 1e6:.2f} us" for k, v in cost.items()}
    assert _spread(cost) > 3 * SPREAD_BOUND, shown
