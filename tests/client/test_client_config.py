"""Settings (docs/protocol.md#client-config): explicit > env > files, private files, keyring
fallback, claim export."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from client import config as cfg
from client.api import LaneClient
from client.config import connect, load_settings, write_private_file
from client.errors import ConfigError

TOKEN = "file-token-0123456789abcdefghijklmnopqrstuvwxyz"


@pytest.fixture(autouse=True)
def no_os_keyring() -> Iterator[None]:
    """A headless machine: the keyring backend that fails every call (never the real one)."""
    import keyring
    from keyring.backends import fail

    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    yield
    keyring.set_keyring(before)


def files(tmp: Path, env_text: str | None = None, token: str | None = None,
          env_mode: int = 0o600, token_mode: int = 0o600) -> dict[str, str]:  # fmt: skip
    cdir = tmp / "cfg"
    cdir.mkdir(exist_ok=True)
    if env_text is not None:
        (cdir / "client.env").write_text(env_text)
        os.chmod(cdir / "client.env", env_mode)
    if token is not None:
        (cdir / "token").write_text(token + "\n")
        os.chmod(cdir / "token", token_mode)
    return {"LANE_CONFIG_DIR": str(cdir), "LANE_STATE_DIR": str(tmp / "state")}


def test_precedence_explicit_env_file(tmp_path: Path) -> None:
    env = files(
        tmp_path,
        "LANE_COORDINATOR_URL=http://file:1\nexport LANE_MACHINE_ID='file-m'\n"
        'LANE_ACCOUNT="file-acct"\n# comment\nLANE_REQUIRED=1\n',
    )
    s = load_settings(environ=dict(env), use_keyring=False)
    assert (s.url, s.machine_id, s.account, s.required) == (
        "http://file:1", "file-m", "file-acct", True,
    )  # fmt: skip
    env2 = dict(env, LANE_COORDINATOR_URL="http://env:2/", LANE_MACHINE_ID="env-m",
                LANE_REQUIRED="0")  # fmt: skip
    s = load_settings(environ=env2, use_keyring=False)
    assert (s.url, s.machine_id, s.account, s.required) == (
        "http://env:2", "env-m", "file-acct", False,
    )  # fmt: skip
    s = load_settings(environ=env2, url="http://arg:3", machine_id="arg-m", account="arg-a",
                      required=True, use_keyring=False)  # fmt: skip
    assert (s.url, s.machine_id, s.account, s.required) == ("http://arg:3", "arg-m", "arg-a", True)


def test_token_file_private_and_loose(tmp_path: Path) -> None:
    env = files(tmp_path, "LANE_COORDINATOR_URL=http://x:1\n", token=TOKEN)
    s = load_settings(environ=dict(env))  # keyring: the fail backend here -> token file
    assert s.token == TOKEN and s.token_source.endswith("token")
    assert TOKEN not in repr(s)
    os.chmod(Path(env["LANE_CONFIG_DIR"]) / "token", 0o644)
    s = load_settings(environ=dict(env))
    assert s.token is None and s.token_problem is not None and "chmod 600" in s.token_problem
    with pytest.raises(ConfigError) as ei:
        connect(s)
    assert "chmod 600" in ei.value.message and "LANE_TOKEN" in ei.value.message
    s = load_settings(environ=dict(env, LANE_TOKEN="env-token"))
    assert s.token == "env-token" and s.token_source == "$LANE_TOKEN"
    assert load_settings(environ=dict(env), token="arg-token").token == "arg-token"


def test_loose_client_env_warns_and_ignores_its_token(tmp_path: Path) -> None:
    env = files(tmp_path, f"LANE_COORDINATOR_URL=http://x:1\nLANE_TOKEN={TOKEN}\n", env_mode=0o644)
    s = load_settings(environ=dict(env), use_keyring=False)
    assert s.url == "http://x:1" and s.token is None
    assert any("0644" in w for w in s.warnings)
    os.chmod(Path(env["LANE_CONFIG_DIR"]) / "client.env", 0o600)
    s = load_settings(environ=dict(env), use_keyring=False)
    assert s.token == TOKEN and not s.warnings


def test_keyring_errors_never_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring

    def broken(*a: object) -> None:
        raise RuntimeError("dbus is gone")

    monkeypatch.setattr(keyring, "get_password", broken)
    monkeypatch.setattr(keyring, "set_password", broken)
    env = files(tmp_path, "LANE_COORDINATOR_URL=http://x:1\n", token=TOKEN)
    assert load_settings(environ=dict(env)).token == TOKEN
    assert cfg.keyring_set("http://x:1", TOKEN) is None
    assert cfg.keyring_get("http://x:1") is None


def test_keyring_used_when_it_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring

    store: dict[tuple[str, str], str] = {}
    monkeypatch.setattr(keyring, "set_password", lambda s, u, p: store.__setitem__((s, u), p))
    monkeypatch.setattr(keyring, "get_password", lambda s, u: store.get((s, u)))
    assert cfg.keyring_set("http://x:1", "kr-token") is not None
    env = files(tmp_path, "LANE_COORDINATOR_URL=http://x:1\n", token=TOKEN)
    s = load_settings(environ=dict(env))
    assert s.token == "kr-token" and "keyring" in s.token_source


def test_claim_minted_once_and_inherited(tmp_path: Path) -> None:
    env = files(tmp_path)
    s = load_settings(environ=env, use_keyring=False)
    assert s.claim_id and env["LANE_CLAIM"] == s.claim_id
    assert load_settings(environ=env, use_keyring=False).claim_id == s.claim_id
    assert load_settings(environ=files(tmp_path), mint_claim=False).claim_id is None
    code = (
        "import os, subprocess, sys\n"
        "from client.config import load_settings\n"
        "s = load_settings(use_keyring=False)\n"
        "child = subprocess.run([sys.executable, '-c', "
        "'import os; print(os.environ[\"LANE_CLAIM\"])'], capture_output=True, text=True)\n"
        "print(s.claim_id, child.stdout.strip())\n"
    )
    clean = {k: v for k, v in os.environ.items() if k != "LANE_CLAIM"}
    out = subprocess.run([sys.executable, "-c", code], env=dict(clean, **files(tmp_path)),
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert len(out) == 2 and out[0] == out[1] and len(out[0]) == 36


@pytest.mark.parametrize(
    ("raw", "want"),
    [(None, 900.0), ("5", 30.0), ("99999", 7200.0), ("120", 120.0), ("abc", 900.0),
     ("nan", 900.0)],
)  # fmt: skip
def test_cooldown_clamped(tmp_path: Path, raw: str | None, want: float) -> None:
    env = files(tmp_path)
    if raw is not None:
        env["LANE_HUMAN_CHECK_COOLDOWN_SECONDS"] = raw
    assert load_settings(environ=env, use_keyring=False).human_check_cooldown_seconds == want


def test_unknown_required_spelling_fails_closed(tmp_path: Path) -> None:
    s = load_settings(environ=dict(files(tmp_path), LANE_REQUIRED="maybe"), use_keyring=False)
    assert s.required and any("fail closed" in w for w in s.warnings)


def test_connect_picks_backend(tmp_path: Path) -> None:
    env = dict(files(tmp_path), LANE_COORDINATOR_URL="http://127.0.0.1:9", LANE_TOKEN=TOKEN,
               LANE_MACHINE_ID="m1", LANE_REQUIRED="1", LANE_TIMEOUT_SECONDS="2.5")  # fmt: skip
    backend = connect(load_settings(environ=env, use_keyring=False))
    assert isinstance(backend, LaneClient) and backend.required and backend.timeout == 2.5
    assert backend.kind == "actor-sqlite" and backend.claim_id == env["LANE_CLAIM"]


def test_write_private_file(tmp_path: Path) -> None:
    p = tmp_path / "d" / "f"
    write_private_file(p, "x")
    assert p.read_text() == "x" and (p.stat().st_mode & 0o777) == 0o600
    assert (p.parent.stat().st_mode & 0o777) == 0o700
