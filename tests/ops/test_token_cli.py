"""`lane-coordinator token add|list|revoke`, what `check` and `serve` refuse in a token file,
and a credential added, then revoked, on a running server with SIGHUP
(docs/operator.md#credentials)."""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import pytest

from coordinator.credentials import token_digest
from tests.harness import TOKEN, CoordinatorProcess, cli, write_config, write_token_file
from tests.harness.credentials import Cred, write_credentials


def _add(path: Path, name: str, *extra: str) -> str:
    done = cli("token", "add", name, *extra, "--token-file", str(path))
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert len(token) >= 43 and "\n" not in token  # stdout: the token alone
    return token


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_add_prints_the_token_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "token"
    path.parent.mkdir()
    token = _add(path, "studio-a", "--role", "driver", "--machine", "studio-a")
    assert _mode(path) == 0o600  # made private, whatever the umask
    text = path.read_text()
    assert token not in text
    assert text == (
        f"sha256:{token_digest(token.encode()).hex()} name=studio-a role=driver machine=studio-a\n"
    )
    done = cli("token", "add", "control-room", "--role", "reader", "--token-file", str(path))
    assert done.returncode == 0
    assert "shown once" in done.stderr and "only its hash is stored" in done.stderr
    assert "systemctl reload lane-coordinator" in done.stderr and "kill -HUP" in done.stderr
    assert "control room" in done.stderr  # what a reader credential is for
    assert len(path.read_text().splitlines()) == 2 and _mode(path) == 0o600
    assert done.stdout.strip() not in path.read_text()


def test_add_keeps_comments_and_plain_lines_and_refuses_a_taken_name(tmp_path: Path) -> None:
    path = tmp_path / "token"
    write_token_file(path, TOKEN)
    path.write_text(f"# the old shared token\n{TOKEN}")  # no final newline
    _add(path, "ops", "--role", "admin")
    lines = path.read_text().splitlines()
    assert lines[:2] == ["# the old shared token", TOKEN] and "name=ops" in lines[2]
    for name in ("ops", "token-1"):  # token-1: the plain line's name
        done = cli("token", "add", name, "--role", "admin", "--token-file", str(path))
        assert done.returncode == 2
        assert f"already has a credential named {name!r}" in done.stderr
    assert len(path.read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("x", "--role", "reader", "--machine", "m"), "--machine binds a driver credential"),
        (("x", "--role", "admin", "--machine", "m"), "--machine binds a driver credential"),
        (("a/b", "--role", "driver"), "NAME must be 1-64"),
        (("x", "--role", "driver", "--machine", "a b"), "--machine must be 1-64"),
    ],
)
def test_add_refuses_what_the_file_would_refuse(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = cli("token", "add", *args, "--token-file", str(tmp_path / "token"))
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not (tmp_path / "token").exists()


def test_add_refuses_a_file_others_may_read(tmp_path: Path) -> None:
    path = tmp_path / "token"
    write_token_file(path, TOKEN)
    path.chmod(0o644)
    done = cli("token", "add", "x", "--role", "admin", "--token-file", str(path))
    assert done.returncode == 2
    assert f"chmod 600 {path}" in done.stderr and TOKEN not in done.stderr
    assert path.read_text() == TOKEN + "\n"


def test_list_names_roles_and_machines_never_a_secret(tmp_path: Path) -> None:
    a, r = Cred("studio-a", "driver", "studio-a"), Cred("control-room", "reader")
    path = write_credentials(tmp_path / "token", [a, r], plain=[TOKEN])
    done = cli("token", "list", "--token-file", str(path))
    assert done.returncode == 0, done.stderr
    rows = [ln.split() for ln in done.stdout.splitlines()]
    assert rows[0] == ["NAME", "ROLE", "MACHINE", "FORM"]
    assert [r[:4] for r in rows[1:]] == [
        ["studio-a", "driver", "studio-a", "hashed"],
        ["control-room", "reader", "-", "hashed"],
        ["token-1", "admin", "-", "plain"],
    ]
    for secret in (a.token, r.token, TOKEN, token_digest(a.token.encode()).hex()):
        assert secret not in done.stdout + done.stderr


def test_revoke_removes_one_line_and_keeps_the_rest(tmp_path: Path) -> None:
    a, b = Cred("studio-a", "driver", "studio-a"), Cred("studio-b", "driver", "studio-b")
    path = write_credentials(tmp_path / "token", [a, b])
    path.write_text("# studio computers\n" + path.read_text())
    done = cli("token", "revoke", "studio-a", "--token-file", str(path))
    assert done.returncode == 0, done.stderr
    assert "revoked 'studio-a'" in done.stderr and "accepted until then" in done.stderr
    assert path.read_text() == f"# studio computers\n{b.line}\n" and _mode(path) == 0o600
    missing = cli("token", "revoke", "studio-a", "--token-file", str(path))
    assert missing.returncode == 2
    assert "no credential named 'studio-a'" in missing.stderr and "studio-b" in missing.stderr
    last = cli("token", "revoke", "studio-b", "--token-file", str(path))
    assert last.returncode == 2 and "the last credential" in last.stderr
    assert b.line in path.read_text()


# ---------------------------------------------------------------- check and serve


def _check(tmp_path: Path, token_file: Path, command: str = "check") -> tuple[int, str, str]:
    done = cli(
        command, "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "data"),
        "--config", str(write_config(tmp_path / "c.toml")), "--token-file", str(token_file),
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_check_counts_the_credentials_by_role(tmp_path: Path) -> None:
    creds = [Cred("a", "driver", "a"), Cred("b", "driver"), Cred("cr", "reader")]
    path = write_credentials(tmp_path / "token", creds, plain=[TOKEN])
    code, out, err = _check(tmp_path, path)
    assert code == 0, err
    assert "4 credential(s) accepted (1 admin, 2 driver, 1 reader; 1 plain" in out


HASH = "sha256:" + "a" * 64
PROBLEMS = [
    (f"{HASH} name=a role=driver\nsha256:{'b' * 64} name=a role=reader\n", "duplicate name 'a'"),
    (f"{HASH} name=cr role=reader machine=m\n", "machine= is only for a driver credential"),
    ("sha256:abc name=a role=admin\n", "a bad hash"),
    (f"{HASH} name=a\n", "role= is required"),
]


@pytest.mark.parametrize(("text", "says"), PROBLEMS)
@pytest.mark.parametrize("command", ["check", "serve"])
def test_check_and_serve_refuse_a_bad_file(
    tmp_path: Path, command: str, text: str, says: str
) -> None:
    path = tmp_path / "token"
    write_token_file(path, "x" * 40)
    path.write_text(text)
    code, _, err = _check(tmp_path, path, command)
    assert code == 2, err
    assert says in err and "line " in err and "listening on" not in err and "Traceback" not in err


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
@pytest.mark.parametrize("command", ["check", "serve"])
def test_check_and_serve_refuse_a_token_file_others_may_read(
    tmp_path: Path, command: str, mode: int
) -> None:
    path = tmp_path / "token"
    write_token_file(path, TOKEN)
    path.chmod(mode)
    code, _, err = _check(tmp_path, path, command)
    assert code == 2, err
    assert f"has mode {mode:04o}" in err and f"run: chmod 600 {path}" in err
    assert TOKEN not in err and "listening on" not in err
    assert not (tmp_path / "data").exists()  # refused before anything was made


def _started(srv: CoordinatorProcess) -> list[str]:
    return [json.loads(ln)["event"] for ln in srv.lines if ln.startswith("{")]


def test_serve_warns_of_plain_tokens_only(tmp_path: Path) -> None:
    plain = CoordinatorProcess(tmp_path / "d1", token=TOKEN)
    try:
        [warned] = plain.events("auth.plain_tokens")
        assert warned["level"] == "warning" and warned["names"] == ["token-1"]
        assert "token add" in warned["hint"] and TOKEN not in "\n".join(plain.lines)
    finally:
        plain.stop()
    hashed = write_credentials(tmp_path / "hashed", [Cred("ops", "admin")])
    srv = CoordinatorProcess(tmp_path / "d2", hashed)
    try:
        assert "auth.plain_tokens" not in _started(srv)
    finally:
        srv.stop()


def test_a_credential_added_then_revoked_with_sighup(tmp_path: Path) -> None:
    path = tmp_path / "token"
    ops = _add(path, "ops", "--role", "admin")
    srv = CoordinatorProcess(tmp_path / "data", path)  # the file as it is (its first field
    # is no token: every call here names its own)
    try:
        studio = _add(path, "studio-a", "--role", "driver", "--machine", "studio-a")
        assert srv.request("GET", "/v1/whoami", studio)[0] == 401  # not reloaded yet
        mark = len(srv.lines)
        srv.signal(signal.SIGHUP)
        rec = srv.wait_for_event("auth.tokens_reloaded", start=mark)
        assert (rec["count"], rec["added"], rec["removed"]) == (2, ["studio-a"], [])
        code, who = srv.request("GET", "/v1/whoami", studio)
        assert code == 200 and (who["name"], who["machine"]) == ("studio-a", "studio-a")
        assert cli("token", "revoke", "studio-a", "--token-file", str(path)).returncode == 0
        mark = len(srv.lines)
        srv.signal(signal.SIGHUP)
        rec = srv.wait_for_event("auth.tokens_reloaded", start=mark)
        assert (rec["count"], rec["removed"]) == (1, ["studio-a"])
        assert srv.request("GET", "/v1/whoami", studio)[0] == 401
        assert srv.request("GET", "/v1/whoami", ops)[0] == 200
        # a reload that makes the file readable by others is refused: the current set stays
        path.chmod(0o644)
        mark = len(srv.lines)
        srv.signal(signal.SIGHUP)
        failed = srv.wait_for_event("auth.tokens_reload_failed", start=mark)
        assert "chmod 600" in str(failed["error"]) and failed["kept"] == 1
        assert srv.request("GET", "/v1/whoami", ops)[0] == 200
    finally:
        assert srv.stop() == 0
    log = "\n".join(srv.lines)
    assert ops not in log and studio not in log
