"""Server configuration (TOML). The credentials (the token file) are coordinator/credentials.py."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator import constants as C
from coordinator.engine.model import LaneSettings
from coordinator.errors import ConfigError
from coordinator.protocol import constants as P
from coordinator.protocol.names import PART_RE, parse_lane

# Connection limits (docs/operator.md, "Limits"): how many connections are open at once, and
# how long a client may take over a request head, over a body, and idle between requests.
DEFAULT_MAX_CONNECTIONS = 1000
MAX_MAX_CONNECTIONS = 100_000
DEFAULT_HEADER_TIMEOUT_SECONDS = 10.0
MAX_HEADER_TIMEOUT_SECONDS = 300.0
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
MAX_BODY_TIMEOUT_SECONDS = 600.0
DEFAULT_KEEPALIVE_TIMEOUT_SECONDS = 75.0
MAX_KEEPALIVE_TIMEOUT_SECONDS = 3600.0
MIN_TIMEOUT_SECONDS = 1.0
# Lane limits (docs/operator.md, "Limits"): how many lanes may have a file, and for how many
# lanes /metrics keeps per-lane series (the most recently active; totals count every lane).
DEFAULT_MAX_LANES = 1000
MAX_MAX_LANES = 1_000_000
DEFAULT_METRICS_MAX_LANES = 100
MAX_METRICS_MAX_LANES = 100_000


@dataclass(slots=True)
class Config:
    default_lease_seconds: float = P.DEFAULT_LEASE_SECONDS
    waiter_timeout_seconds: float = C.DEFAULT_WAITER_TIMEOUT_SECONDS
    default_hold_seconds: float = C.DEFAULT_HOLD_SECONDS
    history_retained: int = C.DEFAULT_HISTORY_RETAINED
    max_body_bytes: int = C.DEFAULT_MAX_BODY_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_seconds: float = DEFAULT_HEADER_TIMEOUT_SECONDS
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS
    keepalive_timeout_seconds: float = DEFAULT_KEEPALIVE_TIMEOUT_SECONDS
    max_lanes: int = DEFAULT_MAX_LANES
    metrics_max_lanes: int = DEFAULT_METRICS_MAX_LANES
    # "sqlite" (None: the default, lane files under --data-dir) or a postgresql:// URL;
    # --store and LANE_COORDINATOR_STORE take precedence (docs/operator.md)
    store: str | None = None
    # PostgreSQL replicas: a replica that stops responding inside a lane transaction blocks
    # the lane on the others for at most this long (docs/protocol.md#replica-stall)
    replica_stall_seconds: float = C.DEFAULT_REPLICA_STALL_SECONDS
    routes: dict[str, int] = field(default_factory=dict)  # route -> capacity
    lanes: dict[str, int] = field(default_factory=dict)  # lane -> capacity override
    # in-flight holds (docs/protocol.md#in-flight): the default, route -> hold, lane -> hold
    in_flight_hold_seconds: float = C.DEFAULT_IN_FLIGHT_HOLD_SECONDS
    route_holds: dict[str, float] = field(default_factory=dict)
    lane_holds: dict[str, float] = field(default_factory=dict)

    def in_flight_hold(self, lane: str) -> float:
        """The lane's in-flight hold: its own, else its route's, else the default."""
        if lane in self.lane_holds:
            return self.lane_holds[lane]
        route, _ = parse_lane(lane)
        return self.route_holds.get(route, self.in_flight_hold_seconds)

    def capacity(self, lane: str) -> int | None:
        if lane in self.lanes:
            return self.lanes[lane]
        route, _ = parse_lane(lane)
        return self.routes.get(route)

    def lane_settings(self, lane: str) -> LaneSettings | None:
        """None when the lane's route has no measured limit (unenforced,
        docs/protocol.md#unenforced)."""
        cap = self.capacity(lane)
        if cap is None:
            return None
        return LaneSettings(
            capacity=cap,
            default_lease_seconds=self.default_lease_seconds,
            waiter_timeout_seconds=self.waiter_timeout_seconds,
            default_hold_seconds=self.default_hold_seconds,
            history_retained=self.history_retained,
            incidents_retained=C.INCIDENTS_RETAINED,
            in_flight_hold_seconds=self.in_flight_hold(lane),
        )


def shown(x: float) -> str:
    """A number as a person writes it: 1000000, not 1e+06; 0.5 stays 0.5."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _number(
    raw: dict[str, Any], key: str, default: float, lo: float, hi: float, *, integer: bool = False
) -> Any:
    if key not in raw:
        return default
    v = raw[key]
    if (
        isinstance(v, bool)
        or not isinstance(v, int | float)
        or (integer and not isinstance(v, int))
    ):
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"config: {key} must be {kind}")
    if not lo <= v <= hi:
        raise ConfigError(f"config: {key} must be between {shown(lo)} and {shown(hi)}, got {v}")
    return v


def _seconds(raw: dict[str, Any], key: str, default: float, hi: float) -> float:
    return float(_number(raw, key, default, MIN_TIMEOUT_SECONDS, hi))


_HOLD_KEY = "in_flight_hold_seconds"


def _in_flight_hold(where: str, table: dict[str, Any]) -> float | None:
    if _HOLD_KEY not in table:
        return None
    v = table[_HOLD_KEY]
    hi = C.MAX_IN_FLIGHT_HOLD_SECONDS
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= hi:
        raise ConfigError(f"config: {where}.{_HOLD_KEY} must be a number from 0 to {shown(hi)}")
    return float(v)


def _capacity(where: str, table: Any) -> int | None:
    if not isinstance(table, dict):
        raise ConfigError(f"config: {where} must be a table")
    unknown = set(table) - {"capacity", _HOLD_KEY}
    if unknown:
        raise ConfigError(f"config: {where} has unknown keys: {', '.join(sorted(unknown))}")
    if "capacity" not in table:
        return None
    cap = table["capacity"]
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1 or cap > 10_000:
        raise ConfigError(f"config: {where}.capacity must be an integer from 1 to 10000")
    return cap


def _waiter_timeout(raw: dict[str, Any]) -> float:
    """A parked await keeps its waiter alive, so the timeout must outlast the longest await."""
    key, lo = "waiter_timeout_seconds", C.MIN_WAITER_TIMEOUT_SECONDS
    v = float(_number(raw, key, C.DEFAULT_WAITER_TIMEOUT_SECONDS, 0, C.MAX_WAITER_TIMEOUT_SECONDS))
    if v < lo:
        raise ConfigError(
            f"config: {key} must be at least {lo:g} (the longest await, "
            f"{P.MAX_AWAIT_SECONDS:g} s, plus a {C.WAITER_TIMEOUT_MARGIN_SECONDS:g} s margin), "
            f"got {v:g}: a shorter one abandons waiters while they wait in an await"
        )
    return v


KNOWN_KEYS = {
    "store",
    "default_lease_seconds",
    "waiter_timeout_seconds",
    "default_hold_seconds",
    "history_retained",
    "max_body_bytes",
    "max_connections",
    "header_timeout_seconds",
    "body_timeout_seconds",
    "keepalive_timeout_seconds",
    "max_lanes",
    "metrics_max_lanes",
    "replica_stall_seconds",
    "in_flight_hold_seconds",
    "routes",
    "lanes",
}


def parse_config(raw: dict[str, Any]) -> Config:
    unknown = set(raw) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"config: unknown keys: {', '.join(sorted(unknown))}")
    cfg = Config(
        default_lease_seconds=float(
            _number(
                raw,
                "default_lease_seconds",
                P.DEFAULT_LEASE_SECONDS,
                P.MIN_LEASE_SECONDS,
                P.MAX_LEASE_SECONDS,
            )
        ),
        waiter_timeout_seconds=_waiter_timeout(raw),
        default_hold_seconds=float(
            _number(raw, "default_hold_seconds", C.DEFAULT_HOLD_SECONDS, 1, 86400)
        ),
        history_retained=_number(
            raw, "history_retained", C.DEFAULT_HISTORY_RETAINED, 1, 1_000_000, integer=True
        ),
        max_body_bytes=_number(
            raw, "max_body_bytes", C.DEFAULT_MAX_BODY_BYTES, 1024, 16 * 1024 * 1024, integer=True
        ),
        max_connections=_number(
            raw, "max_connections", DEFAULT_MAX_CONNECTIONS, 1, MAX_MAX_CONNECTIONS, integer=True
        ),
        header_timeout_seconds=_seconds(
            raw,
            "header_timeout_seconds",
            DEFAULT_HEADER_TIMEOUT_SECONDS,
            MAX_HEADER_TIMEOUT_SECONDS,
        ),
        body_timeout_seconds=_seconds(
            raw, "body_timeout_seconds", DEFAULT_BODY_TIMEOUT_SECONDS, MAX_BODY_TIMEOUT_SECONDS
        ),
        keepalive_timeout_seconds=_seconds(
            raw,
            "keepalive_timeout_seconds",
            DEFAULT_KEEPALIVE_TIMEOUT_SECONDS,
            MAX_KEEPALIVE_TIMEOUT_SECONDS,
        ),
        max_lanes=_number(raw, "max_lanes", DEFAULT_MAX_LANES, 1, MAX_MAX_LANES, integer=True),
        metrics_max_lanes=_number(
            raw,
            "metrics_max_lanes",
            DEFAULT_METRICS_MAX_LANES,
            1,
            MAX_METRICS_MAX_LANES,
            integer=True,
        ),
        replica_stall_seconds=float(
            _number(
                raw,
                "replica_stall_seconds",
                C.DEFAULT_REPLICA_STALL_SECONDS,
                C.MIN_REPLICA_STALL_SECONDS,
                C.MAX_REPLICA_STALL_SECONDS,
            )
        ),
    )
    cfg.in_flight_hold_seconds = float(
        _number(raw, _HOLD_KEY, C.DEFAULT_IN_FLIGHT_HOLD_SECONDS, 0, C.MAX_IN_FLIGHT_HOLD_SECONDS)
    )
    store = raw.get("store")
    if store is not None:
        if not isinstance(store, str) or not store:
            raise ConfigError("config: store must be 'sqlite' or a postgresql:// URL")
        cfg.store = store
    routes = raw.get("routes", {})
    if not isinstance(routes, dict):
        raise ConfigError("config: [routes] must be a table")
    for route, table in routes.items():
        if not PART_RE.fullmatch(route):
            raise ConfigError(f"config: route name {route!r} is not 1-64 of [a-z0-9._-]")
        cap = _capacity(f"routes.{route}", table)
        if cap is not None:
            cfg.routes[route] = cap
        hold = _in_flight_hold(f"routes.{route}", table)
        if hold is not None:
            cfg.route_holds[route] = hold
    lanes = raw.get("lanes", {})
    if not isinstance(lanes, dict):
        raise ConfigError("config: [lanes] must be a table")
    for lane, table in lanes.items():
        try:
            parse_lane(lane)
        except Exception as exc:
            raise ConfigError(f"config: lane name {lane!r} is not route:account") from exc
        cap = _capacity(f'lanes."{lane}"', table)
        if cap is not None:
            cfg.lanes[lane] = cap
        hold = _in_flight_hold(f'lanes."{lane}"', table)
        if hold is not None:
            cfg.lane_holds[lane] = hold
    return cfg


def load_config(path: Path | None) -> Config:
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config: cannot read {path}: {exc.strerror}") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config: {path} is not valid TOML: {exc}") from exc
    return parse_config(raw)
