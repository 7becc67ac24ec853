"""Fixtures of the power-loss tests: the shim (compiled once per session; `make test` runs
scripts/ensure-cc.sh first, which installs a compiler on Debian when there is none — without
one these tests fail with that hint, they are never skipped). Servers come from
`start_coordinator` in tests/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.powerloss.disk import build_shim, compiler


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
