"""The real `lane-coordinator serve` as a subprocess on loopback, and other followed processes.

`CoordinatorProcess(data_dir, ...)` starts `lane-coordinator serve --host 127.0.0.1 --port 0`
(the OS picks the port; the URL is read from its "listening on" line), with a token file
(written with a fresh token unless one is given), an optional config file, and stdout/stderr
captured line by line (`lines`, `events(name)`, `wait_for_event`). Stop it with `stop()`
(SIGTERM, returns the exit code), `kill9()` (SIGKILL) or `signal(sig)`. `request`/`op` are a
tiny synchronous HTTP client for it.

`LineProcess(args, env)` is any subprocess whose merged output is followed line by line
(`lane drill` roles); `cli(*args)` runs `lane-coordinator ARGS` to completion, `run_bench(*args)`
`python -m bench ARGS` from the repo.

Each runs in its own session (a Ctrl-C in the terminal does not reach it) and is registered
with tests.harness.cleanup: should the run end before the test stops it (SIGTERM, SIGINT, a
test without teardown), its process group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.config import Config
from tests.harness import cleanup
from tests.harness.config import (
    COORDINATOR_BIN,
    REPO,
    new_token,
    write_config,
    write_token_file,
)

START_TIMEOUT = 60.0  # generous: the machine is shared
_UNSET: Any = object()


def coordinator_cmd() -> list[str]:
    """The installed console script, else the module (an environment without scripts)."""
    if COORDINATOR_BIN.exists():
        return [str(COORDINATOR_BIN)]
    return [sys.executable, "-m", "coordinator.cli"]


def _env_without_token(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LANE_COORDINATOR_TOKEN"}
    env.update(extra or {})
    return env


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `lane-coordinator ARGS` to completion (no LANE_COORDINATOR_TOKEN unless `env`
    sets it)."""
    return subprocess.run(
        [*coordinator_cmd(), *args],
        capture_output=True,
        text=True,
        env=_env_without_token(env),
        timeout=120,
        check=False,
    )


def run_bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m bench ARGS` from the repo to completion, `env` added to ours."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# A process started from a shell's background job inherits SIGINT ignored (and an ignored
# signal stays ignored across exec, in Python and in bash alike): a test that sends SIGINT,
# as Ctrl-C does, starts its process through this, with SIGINT back to its default.
_SIGINT_DEFAULT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def interruptible(args: list[str]) -> list[str]:
    """`args` run with SIGINT at its default action, whatever this process inherited."""
    return [sys.executable, "-c", _SIGINT_DEFAULT, *args]


class LineProcess:
    """A subprocess whose merged stdout/stderr is collected line by line in a thread."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        cwd: Path = REPO,
        *,
        sigint_default: bool = False,
    ) -> None:
        """`sigint_default`: start it with SIGINT at its default action (`interruptible`),
        for a test that interrupts it as Ctrl-C would."""
        self.args = args
        self.proc = subprocess.Popen(
            interruptible(args) if sigint_default else args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self._cleanup = cleanup.track_process(self.proc, group=True, name=f"{args[:3]}")
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stopped(self) -> bool:
        """The process is stopped (SIGSTOP: state `T` in /proc/<pid>/stat; Linux)."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    @property
    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for_line(
        self, pred: Callable[[str], bool], timeout: float = 60.0, start: int = 0
    ) -> str:
        """The first line from `lines[start:]` that matches `pred` (waits for it)."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for ln in self.lines[start:]:
                    if pred(ln):
                        return ln
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    tail = "\n".join(self.lines[-30:])
                    raise AssertionError(f"{self.args[:3]}: line never appeared; output:\n{tail}")
                self._cond.wait(min(left, 0.5))

    def wait(self, timeout: float = 300.0) -> int:
        """Wait for the exit (killing it after `timeout`); returns the exit code."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            msg = f"{self.args[:3]} still running after {timeout} s:\n{self.text}"
            raise AssertionError(msg) from None
        self._reader.join(timeout=10)
        cleanup.unregister(self._cleanup)
        return code

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL (if still running) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        cleanup.unregister(self._cleanup)


class CoordinatorProcess(LineProcess):
    """`lane-coordinator serve` on 127.0.0.1:<port 0> (see the module docstring).

    `token_file`: used as is when it exists (`token` is then its first line), else written
    with `token` (default: a fresh one); default `<data_dir>.token`. `token_env=True` passes
    the token in LANE_COORDINATOR_TOKEN instead. `config`: a TOML path, or a `Config` written
    as `<data_dir>.toml`; None runs without --config. `command` replaces the repo's
    `lane-coordinator` (an installed copy), `env` the whole environment (default: ours
    without LANE_COORDINATOR_TOKEN), `extra_env` variables added to it (a failpoint:
    coordinator/failpoints.py). The data dir is not created here: the coordinator makes
    it (0700)."""

    def __init__(
        self,
        data_dir: Path,
        token_file: Path | None = None,
        config: Path | Config | None = None,
        *,
        token: str | None = None,
        token_env: bool = False,
        log_level: str | None = None,
        extra_args: tuple[str, ...] = (),
        store: str | None = None,
        command: list[str] | None = None,
        env: dict[str, str] | None = None,
        extra_env: dict[str, str] | None = None,
        cwd: Path = REPO,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.data_dir = data_dir
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        base_env = dict(env) if env is not None else _env_without_token()
        base_env.update(extra_env or {})
        args = [*(command or coordinator_cmd()), "serve", "--host", "127.0.0.1", "--port", "0"]
        args += ["--data-dir", str(data_dir)]
        if store is not None:  # a replica on PostgreSQL (the data dir holds nothing then)
            args += ["--store", store]
        self.token_file: Path | None = None
        if token_env:  # the token in LANE_COORDINATOR_TOKEN, no file
            self.token = token if token is not None else new_token()
            base_env["LANE_COORDINATOR_TOKEN"] = self.token
        else:
            self.token_file = token_file or data_dir.with_name(data_dir.name + ".token")
            if self.token_file.exists() and token is None:
                first = self.token_file.read_text(encoding="utf-8").split()
                self.token = first[0] if first else ""
            else:
                self.token = write_token_file(self.token_file, token)
            args += ["--token-file", str(self.token_file)]
        if isinstance(config, Config):
            config = write_config(data_dir.with_name(data_dir.name + ".toml"), config)
        self.config = config
        if config is not None:
            args += ["--config", str(config)]
        if log_level is not None:
            args += ["--log-level", log_level]
        super().__init__([*args, *extra_args], base_env, cwd)
        try:
            line = self.wait_for_line(lambda ln: "listening on http://" in ln, start_timeout)
        except BaseException:
            self.kill()
            raise
        self.url = line.split("listening on ", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])

    # ------------------------------------------------------------------ logs

    def events(self, name: str, start: int = 0) -> list[dict[str, Any]]:
        """The JSON log records named `name` (from `lines[start:]`)."""
        with self._cond:
            lines = list(self.lines[start:])
        out = []
        for ln in lines:
            if ln.startswith("{"):
                rec = json.loads(ln)
                if rec.get("event") == name:
                    out.append(rec)
        return out

    def wait_for_event(self, name: str, start: int = 0, timeout: float = 30.0) -> dict[str, Any]:
        def is_event(ln: str) -> bool:
            return ln.startswith("{") and json.loads(ln).get("event") == name

        rec: dict[str, Any] = json.loads(self.wait_for_line(is_event, timeout, start))
        return rec

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> int:
        """SIGTERM (if still running), wait for the graceful stop; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        cleanup.unregister(self._cleanup)
        return self.proc.returncode

    def kill9(self) -> int:
        """SIGKILL: the coordinator gets no chance to drain; returns the exit code (-9)."""
        if self.proc.returncode is None:  # not reaped yet: the pid is still its own
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        cleanup.unregister(self._cleanup)
        return self.proc.returncode

    # ------------------------------------------------------------------ HTTP

    def request(
        self,
        method: str,
        path: str,
        token: str | None = _UNSET,
        body: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """One call; returns (status, decoded JSON or the raw text). `token` defaults to this
        coordinator's; None sends no Authorization."""
        token = self.token if token is _UNSET else token
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            status = exc.code
        text = raw.decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def op(self, name: str, body: dict[str, Any], token: str | None = _UNSET) -> dict[str, Any]:
        """POST /v1/lanes/<name> with protocolVersion 1; asserts 200/201, returns the body."""
        status, reply = self.request(
            "POST", f"/v1/lanes/{name}", token, {"protocolVersion": 1, **body}
        )
        assert status in (200, 201), (name, status, reply)
        assert isinstance(reply, dict)
        return reply

    def status(self, lane: str) -> dict[str, Any]:
        return self.op("status", {"lane": lane})

    def history(self, lane: str, limit: int = 500) -> dict[str, Any]:
        return self.op("history", {"lane": lane, "limit": limit})


StartCoordinator = Callable[..., CoordinatorProcess]
"""`start_coordinator(data_dir, **kwargs)` (the fixture in tests/conftest.py)."""
