"""Kit for the drill tests: the REAL `lane-coordinator serve` as a subprocess on loopback (port
chosen by the OS, temp data dir, deploy/example-config.toml), `lane drill` role processes with
their output followed line by line, and small authenticated reads."""

from __future__ import annotations

import json
import os
import secrets
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

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = REPO / "deploy" / "example-config.toml"
LANE = "drill:acceptance"
BARRIER = "drill:acceptance-barrier"
START_TIMEOUT = 60.0  # generous: the machine is shared


class Proc:
    """A subprocess whose merged stdout/stderr is collected line by line in a thread."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path = REPO) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
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
    def text(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(self, pred: Callable[[str], bool], timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for ln in self.lines:
                    if pred(ln):
                        return ln
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    tail = "\n".join(self.lines[-30:])
                    raise AssertionError(f"{self.args[:3]}: line never appeared; output:\n{tail}")
                self._cond.wait(min(left, 0.5))

    def wait(self, timeout: float = 300.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            msg = f"{self.args[:3]} still running after {timeout} s:\n{self.text}"
            raise AssertionError(msg) from None
        self._reader.join(timeout=10)
        return code

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


class Coordinator:
    """`lane-coordinator serve` on 127.0.0.1:<port 0> with the example config."""

    def __init__(self, tmp: Path, data_dir: Path | None = None) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir or tmp / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_urlsafe(32)
        token_file = tmp / "coordinator-token"
        token_file.write_text(self.token + "\n", encoding="utf-8")
        token_file.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if k != "LANE_COORDINATOR_TOKEN"}
        self.proc = Proc(
            [str(BIN / "lane-coordinator"), "serve", "--host", "127.0.0.1", "--port", "0",
             "--data-dir", str(self.data_dir), "--config", str(CONFIG),
             "--token-file", str(token_file)],
            env,
        )  # fmt: skip
        line = self.proc.wait_for(lambda ln: "listening on http://" in ln, START_TIMEOUT)
        self.url = line.split("listening on ", 1)[1].strip()

    def stop(self) -> None:
        if self.proc.proc.poll() is None:
            self.proc.signal(signal.SIGTERM)
            try:
                self.proc.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def post(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps({"protocolVersion": 1, **body}).encode()
        req = urllib.request.Request(f"{self.url}/v1/lanes/{op}", data=data, method="POST")
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=60) as resp:
            out: dict[str, Any] = json.loads(resp.read())
        return out

    def status(self, lane: str) -> dict[str, Any]:
        return self.post("status", {"lane": lane})

    def history(self, lane: str, limit: int = 500) -> dict[str, Any]:
        return self.post("history", {"lane": lane, "limit": limit})


def clean_env(tmp: Path) -> dict[str, str]:
    """No LANE_* from the developer's shell, private config dir, no keyring."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LANE_") and k not in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")
    }
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HOME=str(home),
        LANE_CONFIG_DIR=str(tmp / "lane-config"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        PYTHONUNBUFFERED="1",
    )
    return env


def role_env(tmp: Path, coord: Coordinator, machine: str, **extra: str) -> dict[str, str]:
    env = clean_env(tmp)
    env.update(
        LANE_COORDINATOR_URL=coord.url,
        LANE_TOKEN=coord.token,
        LANE_MACHINE_ID=machine,
        LANE_CLAIM=f"{machine}-{secrets.token_hex(4)}",
        LANE_REQUIRED="1",
        LANE_CONFIG_DIR=str(tmp / f"lane-config-{machine}"),
    )
    env.update(extra)
    return env


def drill(env: dict[str, str], *args: str) -> Proc:
    """`lane drill ARGS` as its own process."""
    return Proc([str(BIN / "lane"), "drill", *args], env)


def live(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [*status["held"], *status["queued"]]
