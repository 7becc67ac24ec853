"""Token rotation without downtime: the token file is re-read on SIGHUP."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.harness import CoordinatorProcess, write_token_file

OLD = "old-token-0123456789-abcdefghijklmnopqrstuv"
NEW = "new-token-9876543210-zyxwvutsrqponmlkjihgfe"


def status_with(srv: CoordinatorProcess, token: str) -> int:
    code, _ = srv.request("GET", "/v1/lanes", token)
    return code


def reload(srv: CoordinatorProcess, event: str = "auth.tokens_reloaded") -> dict[str, object]:
    mark = len(srv.lines)
    srv.signal(signal.SIGHUP)
    return srv.wait_for_event(event, start=mark)


def test_sighup_rotates_tokens_without_a_restart(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    write_token_file(token_file, OLD)
    srv = CoordinatorProcess(tmp_path / "data", token_file)
    pid = srv.proc.pid
    try:
        assert status_with(srv, OLD) == 200
        assert status_with(srv, NEW) == 401

        # Step 1: accept both while the computers move over one at a time.
        token_file.write_text(f"{OLD}\n{NEW}\n")
        rec = reload(srv)
        assert rec["count"] == 2
        assert status_with(srv, OLD) == 200
        assert status_with(srv, NEW) == 200

        # Step 2: retire the old one.
        token_file.write_text(NEW + "\n")
        rec = reload(srv)
        assert rec["count"] == 1
        assert status_with(srv, OLD) == 401
        assert status_with(srv, NEW) == 200

        # A broken file (a token too short) is refused and the current tokens are kept.
        token_file.write_text("tooShortXYZ\n")
        failed = reload(srv, "auth.tokens_reload_failed")
        assert "at least 32" in str(failed["error"])
        assert status_with(srv, NEW) == 200
        assert srv.proc.poll() is None and srv.proc.pid == pid  # never restarted
    finally:
        code = srv.stop()
    assert code == 0
    log = "\n".join(srv.lines)
    for secret in (OLD, NEW, "tooShortXYZ"):
        assert secret not in log
