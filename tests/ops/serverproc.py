"""The real `lane-coordinator` as a subprocess on loopback (port chosen by the OS), and a
tiny synchronous HTTP client for it. Used where the process itself matters: signals,
online backup of files another process is writing, restore, deploy config."""

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
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent / "lane-coordinator"
START_TIMEOUT = 60.0  # generous: the machine is shared


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `lane-coordinator ARGS` to completion."""
    cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "coordinator.cli"]
    full_env = {k: v for k, v in os.environ.items() if k != "LANE_COORDINATOR_TOKEN"}
    full_env.update(env or {})
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, env=full_env, timeout=120, check=False
    )


class ServerProcess:
    def __init__(self, data_dir: Path, token_file: Path, config: Path | None = None) -> None:
        cmd = [str(BIN)] if BIN.exists() else [sys.executable, "-m", "coordinator.cli"]
        args = [*cmd, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(data_dir)]
        args += ["--token-file", str(token_file)]
        if config is not None:
            args += ["--config", str(config)]
        env = {k: v for k, v in os.environ.items() if k != "LANE_COORDINATOR_TOKEN"}
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        line = self.wait_for_line(lambda ln: "listening on http://" in ln, START_TIMEOUT)
        self.url = line.split("listening on ", 1)[1].strip()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, pred: Any, timeout: float = 30.0, start: int = 0) -> str:
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                for ln in self.lines[start:]:
                    if pred(ln):
                        return ln
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    tail = "\n".join(self.lines[-20:])
                    raise AssertionError(f"server never logged the line; last lines:\n{tail}")
                self._cond.wait(min(left, 0.5))

    def events(self, name: str, start: int = 0) -> list[dict[str, Any]]:
        out = []
        with self._cond:
            lines = list(self.lines[start:])
        for ln in lines:
            if ln.startswith("{"):
                rec = json.loads(ln)
                if rec.get("event") == name:
                    out.append(rec)
        return out

    def wait_for_event(self, name: str, start: int = 0, timeout: float = 30.0) -> dict[str, Any]:
        line = self.wait_for_line(
            lambda ln: ln.startswith("{") and json.loads(ln).get("event") == name, timeout, start
        )
        rec: dict[str, Any] = json.loads(line)
        return rec

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._reader.join(timeout=10)
        return self.proc.returncode

    def request(
        self, method: str, path: str, token: str | None, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
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

    def op(self, name: str, body: dict[str, Any], token: str) -> dict[str, Any]:
        status, reply = self.request(
            "POST", f"/v1/lanes/{name}", token, {"protocolVersion": 1, **body}
        )
        assert status in (200, 201), (name, status, reply)
        assert isinstance(reply, dict)
        return reply


def write_config(path: Path) -> Path:
    path.write_text("[routes.solo]\ncapacity = 1\n[routes.duo]\ncapacity = 2\n", encoding="utf-8")
    return path
