"""The fault campaign's fixtures: the `row` each test fills, servers that are always cleaned
up, and the table at the end of the run (tests/faults/table.py).

FAULTS_FULL=1 selects the full run (`make faults`, a few minutes); without it each fault
runs once, briefly (`make test`). Mark a test with `@pytest.mark.fault("(x) name")`: that
is its row's name.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from tests.faults.table import RESULTS_ENV, ROWS, Row, keep, render

_REPORT = pytest.StashKey[pytest.TestReport]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fault(name): the fault campaign row this test fills")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        item.stash[_REPORT] = rep
    return rep


@pytest.fixture
def row(request: pytest.FixtureRequest) -> Iterator[Row]:
    marker = request.node.get_closest_marker("fault")
    name = str(marker.args[0]) if marker is not None else request.node.name
    r = Row(name)
    yield r
    rep = request.node.stash.get(_REPORT, None)
    if rep is None:
        r.result = "not run"
    elif hasattr(rep, "wasxfail"):
        r.result = "xfail (known)" if rep.skipped else "XPASS (fixed? drop the xfail)"
    elif rep.passed:
        r.result = "pass"
    else:
        r.result = "FAIL"
        if rep.longrepr is not None:
            crash = getattr(rep.longrepr, "reprcrash", None)
            msg = getattr(crash, "message", str(rep.longrepr))
            r.note("failed: " + str(msg).splitlines()[0][:200])
    keep(r)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS and not os.environ.get(RESULTS_ENV):  # `make faults` prints it itself
        terminalreporter.write_sep("=", "fault campaign")
        terminalreporter.write_line(render(ROWS))
