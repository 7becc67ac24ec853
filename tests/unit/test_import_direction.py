"""Import direction: the wire protocol depends on nothing of the server or the client, and a
client that talks HTTP loads no server code.

- `coordinator.protocol` (and each submodule) imports only the standard library, msgspec and
  rfc8785 (receipt hashes are RFC 8785 canonical JSON, a protocol fact), and what those two
  import themselves (msgspec loads typing_extensions) — plus the `coordinator` package's own
  `__init__`, which must stay trivial.
- `client.api` (and `client.models`, `client.errors`) load no server module: no
  coordinator.http / actor / service / store / engine / config, no aiohttp.web, and of the
  `coordinator` package nothing but `coordinator.protocol`.
- `coordinator.engine` (the lane core, the operations, the store protocol) imports no host:
  no coordinator.actor / service / http / store, no client, no aiohttp.
- `client.local` runs the engine on a SQLite store and loads no server host: no
  coordinator.actor / service / http, no aiohttp.web.
- A host (the lane actors, the service, the local queue) imports no database driver and no
  store connection, SQL or row module: it goes through the store's interface.

Each import runs in a fresh interpreter, so what another test imported cannot hide a leak.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROTOCOL_MODULES = (
    "coordinator.protocol",
    "coordinator.protocol.constants",
    "coordinator.protocol.control_room",
    "coordinator.protocol.lane_replies",
    "coordinator.protocol.names",
    "coordinator.protocol.errors",
    "coordinator.protocol.queries",
    "coordinator.protocol.replies",
    "coordinator.protocol.requests",
    "coordinator.protocol.receipts",
)
PROTOCOL_THIRD_PARTY = frozenset({"msgspec", "rfc8785"})
CLIENT_MODULES = (
    "client.api",
    "client.backend",
    "client.models",
    "client.errors",
    "client.transport",
)
ENGINE_MODULES = (
    "coordinator.engine",
    "coordinator.engine.commands",
    "coordinator.engine.eta_error",
    "coordinator.engine.eta_estimate",
    "coordinator.engine.lane",
    "coordinator.engine.lane_queue",
    "coordinator.engine.lane_slots",
    "coordinator.engine.lane_views",
    "coordinator.engine.long_poll",
    "coordinator.engine.model",
    "coordinator.engine.operations",
    "coordinator.engine.overview",
    "coordinator.engine.store",
    "coordinator.engine.transaction",
    "coordinator.engine.unenforced",
    "coordinator.engine.views",
)
ENGINE_FORBIDDEN = (
    "coordinator.actor",
    "coordinator.service",
    "coordinator.http",
    "coordinator.store",
    "client",
    "aiohttp",
)
LOCAL_FORBIDDEN = ("coordinator.actor", "coordinator.service", "coordinator.http", "aiohttp.web")
SERVER_SIDE = (
    "coordinator.http",
    "coordinator.actor",
    "coordinator.service",
    "coordinator.store",
    "coordinator.engine",
    "coordinator.config",
    "aiohttp.web",
)


def loaded_by(module: str) -> list[str]:
    """The modules `import <module>` adds to sys.modules in a fresh interpreter."""
    probe = (
        "import sys, json; before = set(sys.modules); "
        f"import {module}; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    found: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


def is_stdlib(name: str) -> bool:
    return name.split(".", 1)[0] in sys.stdlib_module_names


@functools.cache
def third_party_closure() -> frozenset[str]:
    """msgspec, rfc8785 and whatever they load themselves."""
    return frozenset(n for m in sorted(PROTOCOL_THIRD_PARTY) for n in loaded_by(m))


@pytest.mark.parametrize("module", PROTOCOL_MODULES)
def test_protocol_imports_only_stdlib_msgspec_and_rfc8785(module: str) -> None:
    loaded = loaded_by(module)
    assert module in loaded
    outside = [
        name
        for name in loaded
        if not is_stdlib(name)
        and name not in third_party_closure()
        and name != "coordinator"
        and not name.startswith("coordinator.protocol")
    ]
    assert outside == [], f"import {module} loads {outside}"


def test_coordinator_package_init_stays_trivial() -> None:
    loaded = [name for name in loaded_by("coordinator") if not is_stdlib(name)]
    assert loaded == ["coordinator"]


@pytest.mark.parametrize("module", CLIENT_MODULES)
def test_client_loads_no_server_code(module: str) -> None:
    loaded = loaded_by(module)
    server = [n for n in loaded if any(n == s or n.startswith(s + ".") for s in SERVER_SIDE)]
    assert server == [], f"import {module} loads server modules {server}"
    coordinator = [n for n in loaded if n.split(".", 1)[0] == "coordinator"]
    beyond = [n for n in coordinator if n != "coordinator" and n.split(".")[1] != "protocol"]
    assert beyond == [], f"import {module} loads {beyond} (only coordinator.protocol allowed)"


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("module", ENGINE_MODULES)
def test_engine_imports_no_host(module: str) -> None:
    loaded = loaded_by(module)
    hosts = [n for n in loaded if _under(n, ENGINE_FORBIDDEN)]
    assert hosts == [], f"import {module} loads {hosts}"


def test_engine_module_list_is_complete() -> None:
    import pkgutil

    import coordinator.engine

    found = {
        f"coordinator.engine.{m.name}" for m in pkgutil.iter_modules(coordinator.engine.__path__)
    }
    assert found | {"coordinator.engine"} == set(ENGINE_MODULES)


def test_local_queue_loads_no_server_host() -> None:
    loaded = loaded_by("client.local")
    assert "coordinator.engine.operations" in loaded
    hosts = [n for n in loaded if _under(n, LOCAL_FORBIDDEN)]
    assert hosts == [], f"import client.local loads {hosts}"


# A host runs lane transactions through the store's interface (coordinator/engine/store.py):
# it never imports a database driver or a store's connection, SQL or row module itself.
HOST_FILES = (
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "coordinator/actor").glob("*.py")),
    "coordinator/service.py",
    "client/local.py",
)
CONNECTION_MODULES = (
    "sqlite3",
    "psycopg",
    "psycopg_pool",
    "coordinator.store.postgres_db",
    "coordinator.store.pg_listen",
    "coordinator.store.sqlite_writes",
    "coordinator.store.postgres_writes",
    "coordinator.store.rows",
    "coordinator.store.reads",
)


def _imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            out.add(node.module)
            out |= {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def _forbidden(names: set[str]) -> list[str]:
    return sorted(n for n in names for m in CONNECTION_MODULES if n == m or n.startswith(m + "."))


@pytest.mark.parametrize("host", HOST_FILES)
def test_hosts_never_import_a_stores_connection(host: str) -> None:
    assert _forbidden(_imported(ROOT / host)) == []


def test_the_host_check_sees_a_connection_import(tmp_path: Path) -> None:
    planted = tmp_path / "host.py"
    planted.write_text(
        "import sqlite3\nfrom coordinator.store.postgres_db import Conn\nimport json\n",
        encoding="utf-8",
    )
    assert _forbidden(_imported(planted)) == [
        "coordinator.store.postgres_db",
        "coordinator.store.postgres_db.Conn",
        "sqlite3",
    ]
    assert "coordinator/actor/pipelined.py" in HOST_FILES
