"""A small pytest session in a subprocess, with the real harness: tests of the harness itself
(a killed run, the loop watchdog) run generated test files this way.

`InnerRun(dir, files, env=)` writes the files and a pytest.ini (asyncio auto mode, as the
project's) into `dir` and starts `python -m pytest -p tests.conftest ...` there: the repo's
tests/conftest.py is loaded as a plugin (its fixtures and hooks, `postgres`, `start_server`,
the cleanup handlers), the repo is on PYTHONPATH, and the session leads its own process group.
Its output goes to `dir/output.txt`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.harness.config import REPO
from tests.harness.subproc import interruptible

PYTEST_INI = """\
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
"""


class InnerRun:
    """`python -m pytest -p tests.conftest -q -s ARGS` over generated files (see the module
    docstring); `wait()` returns its exit code, `output` its output, `kill()` ends its group."""

    def __init__(
        self,
        directory: Path,
        files: Mapping[str, str],
        *args: str,
        env: Mapping[str, str] | None = None,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "pytest.ini").write_text(PYTEST_INI)
        for name, text in files.items():
            (directory / name).write_text(text)
        self.output_file = directory / "output.txt"
        full_env = dict(os.environ)
        full_env.pop("PYTEST_ADDOPTS", None)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        full_env.update(env or {})
        cmd = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider"]
        cmd += ["-q", "-s", *args]
        with self.output_file.open("wb") as out:
            self.proc = subprocess.Popen(
                interruptible(cmd),
                cwd=directory,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def output(self) -> str:
        try:
            return self.output_file.read_text(errors="replace")
        except OSError:
            return ""

    def wait(self, timeout: float = 300.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the inner pytest ran over {timeout} s:\n{self.output}") from None

    def kill(self) -> None:
        """SIGKILL its whole process group (while not reaped: the group id is still its)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
