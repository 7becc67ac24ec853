"""Fixtures of the power-loss tests: the shim (compiled once per session; `make test` runs
scripts/ensure-cc.sh first, which installs a compiler on Debian when there is none — without
one these tests fail with that hint, they are never skipped) and servers that are always
killed at teardown."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import CoordinatorProcess
from tests.powerloss.disk import build_shim, compiler

StartCoordinator = Callable[..., CoordinatorProcess]


@pytest.fixture(scope="session")
def shim_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not sys.platform.startswith("linux"):
        pytest.fail("the power-loss shim is an LD_PRELOAD library for Linux (glibc)")
    if compiler() is None:
        pytest.fail(
            "no C compiler (cc, gcc, clang) to build the power-loss shim: "
            "run `sh scripts/ensure-cc.sh` (as root on Debian it installs gcc)"
        )
    return build_shim(tmp_path_factory.mktemp("powerloss-shim"))


@pytest.fixture
def start_coordinator() -> Iterator[StartCoordinator]:
    """`start_coordinator(data_dir, **kwargs)`: a `CoordinatorProcess`, killed at teardown."""
    started: list[CoordinatorProcess] = []

    def start(data_dir: Path, **kwargs: Any) -> CoordinatorProcess:
        srv = CoordinatorProcess(data_dir, **kwargs)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.kill()
