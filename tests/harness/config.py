"""The shared test configuration: tokens, lane names, coordinator configs, clean environments.

One place for what every test folder used to define for itself. Configs are `Config` objects;
`write_config` renders one as the TOML file a `lane-coordinator serve` subprocess reads, so an
in-process and a subprocess coordinator can run the very same configuration.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sys
from pathlib import Path

from coordinator.config import Config

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's console scripts: lane, lane-coordinator
LANE_BIN = BIN / "lane"
COORDINATOR_BIN = BIN / "lane-coordinator"
EXAMPLE_CONFIG = REPO / "deploy" / "example-config.toml"

#: The fixed token of the HTTP suites (48 bytes). Starters that need no fixed token mint one.
TOKEN = "test-token-0123456789-abcdefghijklmnopqrstuvwxyz"

# ---------------------------------------------------------------- the HTTP suites' config
# (tests/integration, tests/acceptance, tests/ops, tests/contract)

SOLO = "solo:main"  # capacity 1
DUO = "duo:main"  # capacity 2
FREE = "free:main"  # route without a capacity: unenforced

# ---------------------------------------------------------------- the client suites' config
# (tests/client, tests/driver: lanes named like a studio's)

CLIENT_ROUTES = {"render": 1, "self-test": 1, "drill": 1}
CLIENT_LANES = {"render:wide": 2}
UNENFORCED_LANE = FREE


def new_token() -> str:
    """A fresh random bearer token (43 characters)."""
    return secrets.token_urlsafe(32)


def make_config(**overrides: object) -> Config:
    """The HTTP suites' config: routes `solo` (capacity 1) and `duo` (capacity 2); `free` has
    no capacity (unenforced). Keyword arguments set any other `Config` field."""
    cfg = Config(routes={"solo": 1, "duo": 2}, lanes={})
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise TypeError(f"Config has no field {key!r}")
        setattr(cfg, key, value)
    return cfg


def client_config(**overrides: object) -> Config:
    """The client suites' config: routes `render`, `self-test`, `drill` (capacity 1), lane
    `render:wide` (capacity 2); `free` is unenforced."""
    base = {"routes": dict(CLIENT_ROUTES), "lanes": dict(CLIENT_LANES)}
    return make_config(**{**base, **overrides})


def config_toml(cfg: Config) -> str:
    """`cfg` as the TOML `lane-coordinator serve --config` reads (only non-default settings)."""
    lines: list[str] = []
    for f in dataclasses.fields(cfg):
        if f.name in ("routes", "lanes", "route_holds", "lane_holds"):
            continue
        value = getattr(cfg, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        lines.append(f"{f.name} = {json.dumps(value)}")
    for table, holds in (("routes", cfg.route_holds), ("lanes", cfg.lane_holds)):
        capacities: dict[str, int] = getattr(cfg, table)
        for name in sorted(set(capacities) | set(holds)):
            lines.append(f"[{table}.{json.dumps(name)}]")
            if name in capacities:
                lines.append(f"capacity = {capacities[name]}")
            if name in holds:
                lines.append(f"in_flight_hold_seconds = {json.dumps(holds[name])}")
    return "\n".join(lines) + "\n"


def write_config(path: Path, cfg: Config | None = None) -> Path:
    """Write `cfg` (default: `make_config()`) as TOML to `path`; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config_toml(cfg if cfg is not None else make_config()), encoding="utf-8")
    return path


def write_token_file(path: Path, token: str | None = None) -> str:
    """A private (0600) token file holding `token` (default: a new one); returns the token."""
    token = token if token is not None else new_token()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n", encoding="utf-8")
    path.chmod(0o600)
    return token


def clean_env(tmp: Path, *, state_dir: bool = True) -> dict[str, str]:
    """An environment for `lane`, driver and drill subprocesses: private HOME and config dir
    (and state dir unless `state_dir=False`), no keyring, no LANE_* or XDG dirs from the
    developer's shell, the repository on PYTHONPATH, unbuffered output."""
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LANE_") and k not in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")
    }
    env.update(
        HOME=str(home),
        LANE_CONFIG_DIR=str(tmp / "lane-config"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
    )
    if state_dir:
        env["LANE_STATE_DIR"] = str(tmp / "lane-state")
    return env


def client_env(base: dict[str, str], url: str, token: str, machine: str) -> dict[str, str]:
    """`base` plus the three settings a client needs to reach a shared coordinator."""
    return {**base, "LANE_COORDINATOR_URL": url, "LANE_TOKEN": token, "LANE_MACHINE_ID": machine}
