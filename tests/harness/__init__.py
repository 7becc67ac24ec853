"""The one test harness: every way the tests start a coordinator, and the shared config.

- `tests.harness.inproc`: the real coordinator in-process — `start_running` on the test's own
  event loop (`Running`), `ThreadedCoordinator` on a loop thread for sync code; a ManualClock
  or the system clock; a fault layer (`faults`/`hits`). `AppThread`/`fake_server` serve any
  app; `tests.harness.fakes.fake_coordinator(kind)` the fail-closed fakes.
- `tests.harness.subproc`: `lane-coordinator serve` as a subprocess (`CoordinatorProcess`),
  followed processes (`LineProcess`), `cli(...)`.
- `tests.harness.config`: TOKEN, lane names, `make_config`/`client_config`, `write_config`,
  `clean_env`.
- `tests.harness.recorder`: a recording reverse proxy (every reply a run got, to judge);
  `tests.harness.openapi_tools`: the OpenAPI document's judges from other ecosystems
  (Redocly CLI, ajv; tools/openapi).
- `tests.harness.clocks`: watched Manual/System clocks for coordinators; `FakeClock` for
  `LocalQueue(clock=)`. `tests.harness.loop`, `tests.harness.net`: pieces they share.

Fixtures stay thin and live in the conftest files (tests/conftest.py has `start_server`,
`server`, `real_server`, `refused_port`, `silent_port`).
"""

from tests.harness.clocks import FakeClock, TestManualClock, TestSystemClock
from tests.harness.config import (
    BIN,
    CLIENT_LANES,
    CLIENT_ROUTES,
    DUO,
    EXAMPLE_CONFIG,
    FREE,
    LANE_BIN,
    REPO,
    SOLO,
    TOKEN,
    UNENFORCED_LANE,
    clean_env,
    client_config,
    client_env,
    config_toml,
    make_config,
    new_token,
    write_config,
    write_token_file,
)
from tests.harness.fakes import FAKE_KINDS, fake_coordinator
from tests.harness.inproc import (
    AppThread,
    Reply,
    Running,
    StartServer,
    ThreadedCoordinator,
    fake_server,
    start_running,
)
from tests.harness.loop import LoopThread
from tests.harness.net import refused_port, silent_socket
from tests.harness.subproc import CoordinatorProcess, LineProcess, StartCoordinator, cli

__all__ = [
    "BIN",
    "CLIENT_LANES",
    "CLIENT_ROUTES",
    "DUO",
    "EXAMPLE_CONFIG",
    "FAKE_KINDS",
    "FREE",
    "LANE_BIN",
    "REPO",
    "SOLO",
    "TOKEN",
    "UNENFORCED_LANE",
    "AppThread",
    "CoordinatorProcess",
    "FakeClock",
    "LineProcess",
    "LoopThread",
    "Reply",
    "Running",
    "StartCoordinator",
    "StartServer",
    "TestManualClock",
    "TestSystemClock",
    "ThreadedCoordinator",
    "clean_env",
    "cli",
    "client_config",
    "client_env",
    "config_toml",
    "fake_coordinator",
    "fake_server",
    "make_config",
    "new_token",
    "refused_port",
    "silent_socket",
    "start_running",
    "write_config",
    "write_token_file",
]
