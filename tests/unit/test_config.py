"""Config parsing and lane names (coordinator/config.py, coordinator/protocol/names.py). The
token file's credentials: tests/unit/test_credentials.py."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator import constants as C
from coordinator.config import (
    Config,
    load_config,
    parse_config,
)
from coordinator.errors import ConfigError
from coordinator.protocol import constants as P
from coordinator.protocol.errors import BadRequest
from coordinator.protocol.names import (
    LANE_FILE_SUFFIX,
    lane_file_name,
    lane_from_file_name,
    parse_lane,
)

SPEC_EXAMPLE = """
default_lease_seconds = 300       # 15..3600
waiter_timeout_seconds = 600
default_hold_seconds = 300        # ETA basis before a lane has history
history_retained = 5000
max_body_bytes = 65536
[routes."seedance-direct"]
capacity = 1                      # a route with no capacity is unenforced
[lanes."seedance-direct:main-unlimited"]
capacity = 1                      # a per-lane override
"""


def toml(text: str) -> Config:
    return parse_config(tomllib.loads(text))


# ---------------------------------------------------------------- config keys


def test_defaults() -> None:
    cfg = parse_config({})
    assert cfg == Config()
    assert cfg.default_lease_seconds == P.DEFAULT_LEASE_SECONDS == 300
    assert cfg.waiter_timeout_seconds == C.DEFAULT_WAITER_TIMEOUT_SECONDS == 600
    assert cfg.default_hold_seconds == C.DEFAULT_HOLD_SECONDS == 300
    assert cfg.history_retained == C.DEFAULT_HISTORY_RETAINED == 5000
    assert cfg.max_body_bytes == C.DEFAULT_MAX_BODY_BYTES == 65536
    assert cfg.max_lanes == 1000 and cfg.metrics_max_lanes == 100
    assert cfg.replica_stall_seconds == C.DEFAULT_REPLICA_STALL_SECONDS == 5
    assert cfg.routes == {} and cfg.lanes == {}
    assert load_config(None) == Config()


def test_spec_example_parses() -> None:
    cfg = toml(SPEC_EXAMPLE)
    assert cfg.routes == {"seedance-direct": 1}
    assert cfg.lanes == {"seedance-direct:main-unlimited": 1}
    assert cfg.capacity("seedance-direct:other") == 1


def test_every_key_is_read() -> None:
    cfg = toml(
        """
        default_lease_seconds = 120.5
        waiter_timeout_seconds = 90
        default_hold_seconds = 45
        history_retained = 777
        max_body_bytes = 4096
        [routes.r1]
        capacity = 3
        [lanes."r2:acct"]
        capacity = 2
        """
    )
    assert cfg.default_lease_seconds == 120.5
    assert cfg.waiter_timeout_seconds == 90.0 and isinstance(cfg.waiter_timeout_seconds, float)
    assert cfg.default_hold_seconds == 45.0
    assert cfg.history_retained == 777
    assert cfg.max_body_bytes == 4096
    assert cfg.routes == {"r1": 3} and cfg.lanes == {"r2:acct": 2}
    s = cfg.lane_settings("r1:main")
    assert s is not None
    assert (s.capacity, s.default_lease_seconds, s.waiter_timeout_seconds) == (3, 120.5, 90.0)
    assert (s.default_hold_seconds, s.history_retained) == (45.0, 777)
    assert s.incidents_retained == C.INCIDENTS_RETAINED


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("default_lease_seconds", "14"),
        ("default_lease_seconds", "3601"),
        ("default_lease_seconds", '"300"'),
        ("default_lease_seconds", "true"),
        ("default_lease_seconds", "nan"),
        ("default_lease_seconds", "inf"),
        ("waiter_timeout_seconds", "0"),
        ("waiter_timeout_seconds", "-5"),
        ("waiter_timeout_seconds", "[600]"),
        ("default_hold_seconds", "0"),
        ("default_hold_seconds", "100000"),
        ("history_retained", "0"),
        ("history_retained", "10.5"),
        ("history_retained", "5000.0"),
        ("max_body_bytes", "10"),
        ("max_body_bytes", "65536.0"),
        ("max_body_bytes", "false"),
        ("max_lanes", "0"),
        ("max_lanes", "1000001"),
        ("max_lanes", "10.0"),
        ("max_lanes", '"1000"'),
        ("max_lanes", "true"),
        ("metrics_max_lanes", "0"),
        ("metrics_max_lanes", "100001"),
        ("metrics_max_lanes", "2.5"),
        ("metrics_max_lanes", "false"),
        ("replica_stall_seconds", "0.5"),
        ("replica_stall_seconds", "31"),
        ("replica_stall_seconds", '"5"'),
        ("replica_stall_seconds", "true"),
    ],
)
def test_bad_value_names_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as exc:
        toml(f"{key} = {value}")
    assert key in str(exc.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("default_lease_seconds", 15),
        ("default_lease_seconds", 3600),
        ("history_retained", 1),
        ("max_body_bytes", 1024),
        ("max_lanes", 1),
        ("max_lanes", 1_000_000),
        ("metrics_max_lanes", 1),
        ("metrics_max_lanes", 100_000),
        ("replica_stall_seconds", 1),
        ("replica_stall_seconds", 30),
    ],
)
def test_range_bounds_are_inclusive(key: str, value: int) -> None:
    cfg = parse_config({key: value})
    assert getattr(cfg, key) == value


@pytest.mark.parametrize("value", [10, 20, 60, 89, 89.9])
def test_waiter_timeout_shorter_than_the_longest_await_is_refused(value: float) -> None:
    """A parked await is the waiter's keep-alive: a timeout under the longest await (60 s)
    plus the margin would abandon a waiter in the middle of its poll."""
    assert C.MIN_WAITER_TIMEOUT_SECONDS == P.MAX_AWAIT_SECONDS + C.WAITER_TIMEOUT_MARGIN_SECONDS
    with pytest.raises(ConfigError) as exc:
        parse_config({"waiter_timeout_seconds": value})
    msg = str(exc.value)
    assert "waiter_timeout_seconds" in msg and "at least 90" in msg, msg
    assert "await" in msg and "\n" not in msg, msg


def test_waiter_timeout_floor_is_inclusive() -> None:
    assert parse_config({"waiter_timeout_seconds": 90}).waiter_timeout_seconds == 90.0
    assert parse_config({"waiter_timeout_seconds": 86400}).waiter_timeout_seconds == 86400.0


def test_unknown_top_level_key_is_named() -> None:
    with pytest.raises(ConfigError) as exc:
        toml("default_lease = 300\nhistory_retained = 10")
    assert "default_lease" in str(exc.value)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("routes = 5", "routes"),
        ("lanes = 5", "lanes"),
        ('[routes."Bad-Route"]\ncapacity = 1', "Bad-Route"),
        ('[routes."a:b"]\ncapacity = 1', "a:b"),
        ("[routes.r]\ncapacity = 0", "routes.r.capacity"),
        ("[routes.r]\ncapacity = 10001", "routes.r.capacity"),
        ('[routes.r]\ncapacity = "1"', "routes.r.capacity"),
        ("[routes.r]\ncapacity = true", "routes.r.capacity"),
        ("[routes.r]\ncapacity = 1.5", "routes.r.capacity"),
        ("[routes.r]\ncapacity = 1\nlimit = 2", "limit"),
        ("routes = { r = 5 }", "routes.r"),
        ('[lanes."nocolon"]\ncapacity = 1', "nocolon"),
        ('[lanes."A:b"]\ncapacity = 1', "A:b"),
        ('[lanes."r:a"]\ncapacity = 0', 'lanes."r:a".capacity'),
        ('[lanes."r:a"]\ncap = 1', "cap"),
    ],
)
def test_bad_route_and_lane_tables_are_named(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as exc:
        toml(text)
    assert named in str(exc.value)


def test_lane_override_beats_route_and_unenforced_without_capacity() -> None:
    cfg = toml(
        """
        [routes.fast]
        capacity = 4
        [routes.free]
        [lanes."fast:slow-account"]
        capacity = 1
        [lanes."free:measured"]
        capacity = 2
        [lanes."other:x"]
        """
    )
    assert cfg.capacity("fast:main") == 4
    assert cfg.capacity("fast:slow-account") == 1  # per-lane override
    assert cfg.capacity("free:main") is None  # route table without capacity: unenforced
    assert cfg.lane_settings("free:main") is None
    assert cfg.capacity("free:measured") == 2  # an override enforces one lane of it
    assert cfg.capacity("other:x") is None  # lane table without capacity
    assert cfg.capacity("unknown:lane") is None and cfg.lane_settings("unknown:lane") is None
    s = cfg.lane_settings("fast:slow-account")
    assert s is not None and s.capacity == 1


def test_capacity_of_a_bad_lane_is_bad_request() -> None:
    with pytest.raises(BadRequest):
        Config().capacity("../etc:passwd")


def test_load_config_file(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text(SPEC_EXAMPLE, encoding="utf-8")
    assert load_config(f) == toml(SPEC_EXAMPLE)


def test_load_config_missing_file_names_it(tmp_path: Path) -> None:
    f = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    assert str(f) in str(exc.value)


def test_load_config_bad_toml_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text("default_lease_seconds = = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        load_config(f)
    assert str(f) in str(exc.value) and "TOML" in str(exc.value)


# ---------------------------------------------------------------- lane names


@pytest.mark.parametrize(
    "lane",
    [
        "seedance-direct:main-unlimited",
        "a:b",
        "0:9",
        "r.1_x-y:acct.2",
        "a" * 64 + ":" + "b" * 64,
    ],
)
def test_valid_lanes(lane: str) -> None:
    route, account = parse_lane(lane)
    assert f"{route}:{account}" == lane
    name = lane_file_name(lane)
    assert name == f"{route}+{account}{LANE_FILE_SUFFIX}"
    assert Path(name).name == name and "/" not in name and "\\" not in name
    assert lane_from_file_name(name) == lane


@pytest.mark.parametrize(
    "lane",
    [
        "../x:y",
        "x:../y",
        "a:b/c",
        "a/b:c",
        "a:b\\c",
        "A:b",
        "a:B",
        "a" * 65 + ":b",
        "a:" + "b" * 65,
        "a:b:c",
        "a",
        ":b",
        "a:",
        ":",
        "",
        "-a:b",
        ".a:b",
        "a:_b",
        "a:b\n",
        "a\n:b",
        " a:b",
        "a:b ",
        "a :b",
        "a:b\x00",
        "a+b:c",
        "a:b+c",
        "\u0430:b",  # Cyrillic a
        "a:b.sqlite/../../x",
    ],
)
def test_hostile_lane_names_are_bad_request(lane: str) -> None:
    with pytest.raises(BadRequest) as exc:
        parse_lane(lane)
    assert exc.value.message.startswith("lane:")
    with pytest.raises(BadRequest):
        lane_file_name(lane)


@pytest.mark.parametrize(
    "name",
    [
        "a+b.sqlite-wal",
        "a+b.sqlite-shm",
        "a+b.sqlite-journal",
        "a+b.db",
        "a+b.SQLITE",
        "ab.sqlite",
        "+b.sqlite",
        "a+.sqlite",
        "A+b.sqlite",
        "a+b+c.sqlite",
        "a:b.sqlite",
        "../a+b.sqlite",
        "a+b\n.sqlite",
        "a+" + "b" * 65 + ".sqlite",
        ".sqlite",
        "backup.sqlite",
    ],
)
def test_non_lane_files_are_ignored(name: str) -> None:
    assert lane_from_file_name(name) is None


_PART = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,63}", fullmatch=True)


@given(_PART, _PART)
def test_lane_file_mapping_round_trips(route: str, account: str) -> None:
    lane = f"{route}:{account}"
    assert parse_lane(lane) == (route, account)
    name = lane_file_name(lane)
    assert lane_from_file_name(name) == lane
    assert "/" not in name and name not in (".", "..")


@given(_PART, _PART, _PART, _PART)
def test_lane_file_mapping_is_one_to_one(r1: str, a1: str, r2: str, a2: str) -> None:
    l1, l2 = f"{r1}:{a1}", f"{r2}:{a2}"
    assert (lane_file_name(l1) == lane_file_name(l2)) is (l1 == l2)


@given(st.text(max_size=140))
def test_any_text_is_a_lane_or_bad_request(text: str) -> None:
    try:
        name = lane_file_name(text)
    except BadRequest:
        return
    # Whatever is accepted maps back to exactly itself.
    assert lane_from_file_name(name) == text


def _raw(**kw: Any) -> dict[str, Any]:
    return dict(kw)


def test_config_lane_names_follow_the_same_rule() -> None:
    with pytest.raises(ConfigError):
        parse_config(_raw(lanes={"a:b\n": {"capacity": 1}}))
    with pytest.raises(ConfigError):
        parse_config(_raw(routes={"r\n": {"capacity": 1}}))
