"""Shared fixtures, thin over tests/harness: the REAL coordinator (create_app) on a loopback
TCP port, served on the test's own event loop.

`server` runs it with an observable ManualClock (tests move time with
`server.clock.advance(s)`); `real_server` runs it with the system clock. Both use a
temp data dir with real SQLite files. `server.op("acquire", {...})` POSTs
/v1/lanes/acquire with the bearer token and `protocolVersion: 1` added.

Lanes of the default config (tests.harness.config): `solo:main` (capacity 1), `duo:main`
(capacity 2), and `free:main` (route without a capacity: unenforced).

`postgres` is one throwaway PostgreSQL cluster for the session (tests.harness.postgres),
started on first use only; `pg_dsn` is a fresh empty database in it for one test.

Every coordinator `start_server` starts runs on the test's loop under a watchdog
(tests.harness.watchdog): a callback or task step that blocks the loop longer than
LANE_TEST_LOOP_BLOCK_SECONDS (default 0.25 s; "off" disables) fails the test, naming it. A
test that blocks on purpose says so: `@pytest.mark.allow_loop_blocking("why")`. The servers'
own start and stop are not judged (disk I/O before they listen / after they stopped serving).

A run ended by SIGTERM or SIGINT still ends what the harness started (clusters, coordinator
subprocesses, their temp dirs): `pytest_configure` installs tests.harness.cleanup's handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import signal
import socket
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from coordinator.clock import Clock
from coordinator.config import Config
from tests.harness import (
    CoordinatorProcess,
    Running,
    StartCoordinator,
    StartServer,
    TestManualClock,
    TestSystemClock,
    make_config,
    silent_socket,
    start_running,
)
from tests.harness import (
    refused_port as _refused_port,
)
from tests.harness.cleanup import install_signal_handlers
from tests.harness.credentials import Cred
from tests.harness.postgres import PostgresCluster
from tests.harness.watchdog import LoopWatchdog, threshold_from_env

_WATCHDOG = pytest.StashKey[LoopWatchdog]()


def pytest_configure(config: pytest.Config) -> None:
    install_signal_handlers()  # SIGTERM/SIGINT end the clusters and processes we started
    config.addinivalue_line(
        "markers",
        "allow_loop_blocking(reason): the test blocks the event loop on purpose; no watchdog "
        "on its in-process coordinators (tests.harness.watchdog)",
    )
    config.addinivalue_line(
        "markers",
        "no_in_flight_holds: the driver suite's coordinator keeps no in-flight holds "
        "(in_flight_hold_seconds = 0)",
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """The test fails (in its call, not as a teardown error) when its loop was blocked."""
    result = yield
    dog = item.stash.get(_WATCHDOG, None)
    if dog is not None:
        dog.check("during the test")
    return result


def _start_watchdog(request: pytest.FixtureRequest) -> LoopWatchdog | None:
    threshold = threshold_from_env()
    if threshold is None or request.node.get_closest_marker("allow_loop_blocking") is not None:
        return None
    dog = LoopWatchdog(asyncio.get_running_loop(), threshold).start()
    request.node.stash[_WATCHDOG] = dog
    return dog


@pytest.fixture
async def start_server(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[StartServer]:
    """Factory: `await start_server(clock=, config=|**config_overrides, data_dir=, tokens=,
    credentials=)`.

    Defaults: a TestManualClock, `make_config()`, `tmp_path/data<n>`, the token TOKEN (the
    admin `token-1`); `credentials`: named ones besides (tests.harness.credentials).
    Every server started is stopped at teardown. The test's loop runs under the watchdog
    (see the module docstring) from here to the servers' stop."""
    started: list[Running] = []
    dog = _start_watchdog(request)

    async def start(
        clock: Clock | None = None,
        config: Config | None = None,
        data_dir: Path | None = None,
        tokens: Sequence[str | bytes] | None = None,
        credentials: Sequence[Cred] = (),
        **config_overrides: Any,
    ) -> Running:
        with dog.excusing() if dog is not None else contextlib.nullcontext():
            srv = await start_running(  # disk I/O before it listens: not judged
                data_dir if data_dir is not None else tmp_path / f"data{len(started)}",
                config=config if config is not None else make_config(**config_overrides),
                clock=clock if clock is not None else TestManualClock(),
                tokens=tokens,
                credentials=credentials,
            )
        started.append(srv)
        return srv

    yield start
    try:
        for srv in reversed(started):
            with dog.excusing() if dog is not None else contextlib.nullcontext():
                await srv.stop()  # after it stopped serving: not judged
    finally:
        if dog is not None:
            dog.stop()
            del request.node.stash[_WATCHDOG]
    if dog is not None:
        dog.check("during setup or teardown")  # what the call's check did not see


@pytest.fixture
async def server(start_server: StartServer) -> Running:
    """The real server with a TestManualClock (time moves only with clock.advance)."""
    return await start_server(clock=TestManualClock())


@pytest.fixture
async def real_server(start_server: StartServer) -> Running:
    """The real server with the system clock (for latency measurements)."""
    return await start_server(clock=TestSystemClock())


@pytest.fixture
def start_coordinator() -> Iterator[StartCoordinator]:
    """`start_coordinator(data_dir, **kwargs)`: the real `lane-coordinator serve` as a
    subprocess (a `CoordinatorProcess`), killed at teardown (a stopped process is continued
    first, so nothing is left frozen)."""
    started: list[CoordinatorProcess] = []

    def start(data_dir: Path, **kwargs: Any) -> CoordinatorProcess:
        srv = CoordinatorProcess(data_dir, **kwargs)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        if srv.proc.poll() is None:
            srv.signal(signal.SIGCONT)
            srv.kill()


@pytest.fixture
def refused_port() -> int:
    """A port nothing listens on (bound, then closed): connection refused."""
    return _refused_port()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A socket that accepts connections (kernel backlog) and never answers."""
    sock: socket.socket = silent_socket()
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """One throwaway PostgreSQL cluster for the whole session (initdb in a temp dir, its own
    postmaster on a free loopback port, about 1 s), started when a test first asks for it;
    stopped and removed at the end. Fault tests may stop, restart or kill9 it: `pg_dsn`
    starts it again when it is down."""
    cluster = PostgresCluster.start_new()
    yield cluster
    cluster.close()


_pg_databases = itertools.count()


@pytest.fixture
def pg_dsn(postgres: PostgresCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, empty database in the session's cluster for this test (dropped after it):
    `postgresql://postgres@127.0.0.1:PORT/t<n>_<test name>`."""
    postgres.start()  # a previous fault test may have left it down
    slug = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")
    name = f"t{next(_pg_databases)}_{slug}"[:63]
    dsn = postgres.fresh_database(name)
    yield dsn
    if postgres.running():
        postgres.drop_database(name)
