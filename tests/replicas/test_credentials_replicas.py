"""Credentials on PostgreSQL replicas (docs/protocol.md#credentials): every replica reads the
same token-file format from its own file and reloads it on its own SIGHUP; a revoked
credential is refused by every replica once it has reloaded (and by none before); what one
replica records of a write's credential, every replica reads."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

from tests.harness import CoordinatorProcess, cli, make_config
from tests.harness.credentials import Cred, write_credentials

LANE = "solo:main"
OPS = Cred("ops", "admin")
STUDIO_A = Cred("studio-a", "driver", "studio-a")


def _reload(srv: CoordinatorProcess) -> dict[str, object]:
    mark = len(srv.lines)
    srv.signal(signal.SIGHUP)
    return srv.wait_for_event("auth.tokens_reloaded", start=mark)


def _whoami(srv: CoordinatorProcess, cred: Cred) -> int:
    return srv.request("GET", "/v1/whoami", cred.token)[0]


def test_a_revoked_credential_is_refused_by_every_replica_after_its_reload(
    pg_dsn: str, tmp_path: Path
) -> None:
    assert cli("migrate", "--store", pg_dsn).returncode == 0
    files = [write_credentials(tmp_path / f"token{i}", [OPS, STUDIO_A]) for i in (1, 2)]
    config = make_config()
    r1 = CoordinatorProcess(tmp_path / "r1", files[0], config, store=pg_dsn)
    try:
        r2 = CoordinatorProcess(tmp_path / "r2", files[1], config, store=pg_dsn)
    except BaseException:
        r1.kill()
        raise
    replicas = (r1, r2)
    try:
        # a write through one replica: its credential is read back through the other
        body = {"protocolVersion": 1, "lane": LANE, "machineId": "studio-a",
                "project": "p", "scene": "s", "promptHash": "h"}  # fmt: skip
        tid = r1.op("acquire", body, STUDIO_A.token)["ticket"]["ticketId"]
        held = r2.op("status", {"lane": LANE}, OPS.token)["held"]
        assert [(t["ticketId"], t["credential"]) for t in held] == [(tid, "studio-a")]
        end = {"lane": LANE, "machineId": "studio-a", "ticketId": tid, "outcome": "completed"}
        r2.op("release", end, STUDIO_A.token)
        [row] = r1.op("history", {"lane": LANE}, OPS.token)["entries"]
        assert (row["credential"], row["releasedBy"]) == ("studio-a", "studio-a")

        # revoke studio-a: the same line removed from each replica's own file
        for path in files:
            kept = [ln for ln in path.read_text().splitlines() if "name=studio-a" not in ln]
            path.write_text("\n".join(kept) + "\n")
        assert _reload(r1)["removed"] == ["studio-a"]
        assert _whoami(r1, STUDIO_A) == 401
        assert _whoami(r2, STUDIO_A) == 200  # its own file is not reloaded yet
        assert _reload(r2)["removed"] == ["studio-a"]
        for srv in replicas:
            assert _whoami(srv, STUDIO_A) == 401
            code, reply = srv.request("POST", "/v1/lanes/acquire", STUDIO_A.token, body)
            assert code == 401, reply
            assert _whoami(srv, OPS) == 200
        # a file copied from another replica (rotation by copying) reads the same
        shutil.copy(files[0], files[1])
        files[1].chmod(0o600)
        assert _reload(r2)["count"] == 1
    finally:
        for srv in replicas:
            assert srv.stop() == 0
