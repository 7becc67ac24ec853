"""Lane, route, account and machine names: the rules, and the only lane -> file-name mapping;
ticket ids."""

from __future__ import annotations

import re
import secrets

from coordinator.protocol.errors import BadRequest

_PART = r"[a-z0-9][a-z0-9._-]{0,63}"
# The end of the text in both regex dialects the patterns are read in: Python's `re` (msgspec
# validates with re.search, where `$` alone also matches before a trailing newline) and
# ECMA-262 with the `u` flag (JSON Schema's dialect, where `$` is the end and Python's `\Z`
# is no valid escape). `$(?!\n)` is the end in both: no newline can follow it.
END = r"$(?!\n)"
PART_PATTERN = rf"^{_PART}{END}"
LANE_PATTERN = rf"^({_PART}):({_PART}){END}"
MACHINE_PATTERN = rf"^[A-Za-z0-9._-]{{1,64}}{END}"
LANE_RE = re.compile(LANE_PATTERN)
PART_RE = re.compile(PART_PATTERN)
MACHINE_RE = re.compile(MACHINE_PATTERN)
LANE_RULE = "lane: must be route:account, each 1-64 of [a-z0-9._-] starting with [a-z0-9]"
LANE_FILE_SUFFIX = ".sqlite"
_FILE_SEP = "+"  # not in the lane alphabet, so the mapping is one-to-one


def parse_lane(lane: str) -> tuple[str, str]:
    """Return (route, account) or raise 400 bad-request."""
    m = LANE_RE.fullmatch(lane)
    if m is None:
        raise BadRequest(LANE_RULE)
    return m.group(1), m.group(2)


def lane_file_name(lane: str) -> str:
    route, account = parse_lane(lane)
    return f"{route}{_FILE_SEP}{account}{LANE_FILE_SUFFIX}"


def lane_from_file_name(name: str) -> str | None:
    """The lane a file in the data dir belongs to, or None when it is not a lane file."""
    if not name.endswith(LANE_FILE_SUFFIX):
        return None
    stem = name[: -len(LANE_FILE_SUFFIX)]
    route, sep, account = stem.partition(_FILE_SEP)
    if not sep or not PART_RE.fullmatch(route) or not PART_RE.fullmatch(account):
        return None
    return f"{route}:{account}"


def new_ticket_id() -> str:
    """`t_` + 128 random bits, url-safe: ticket ids are lease capabilities."""
    return "t_" + secrets.token_urlsafe(16)
