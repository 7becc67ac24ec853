"""The client and credentials (docs/client.md#setup): `lane setup` stores a driver credential
this machine may use and refuses a reader or one bound to another machine, writing nothing;
`lane dashboard` prefers LANE_READ_TOKEN (a reader credential) and says so when it falls back
to the driver's; 403 role-forbidden and machine-mismatch are clear errors, pre-provider (exit
3) under LANE_REQUIRED=1."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.client.kit import lane
from tests.harness import ThreadedCoordinator, client_config
from tests.harness.config import client_env
from tests.harness.credentials import Cred

READER = Cred("control-room", "reader")
STUDIO_M = Cred("studio-m", "driver", "studio-m")
ANY = Cred("render-farm", "driver")
LANE = "render:main"


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[ThreadedCoordinator]:
    s = ThreadedCoordinator(
        tmp_path / "data", config=client_config(), credentials=[READER, STUDIO_M, ANY]
    )
    yield s
    s.stop()


def _nothing_written(env: dict[str, str]) -> bool:
    cdir = Path(env["LANE_CONFIG_DIR"])
    return not (cdir / "token").exists() and not (cdir / "client.env").exists()


@pytest.mark.parametrize(
    ("cred", "machine", "says"),
    [
        (READER, "studio-m", "'control-room' (role reader) reads only"),
        (STUDIO_M, "studio-x", "is bound to machine 'studio-m', not 'studio-x'"),
    ],
)
def test_setup_refuses_a_credential_that_cannot_drive_this_machine(
    coordinator: ThreadedCoordinator,
    lane_env: dict[str, str],
    cred: Cred,
    machine: str,
    says: str,
) -> None:
    env = dict(lane_env)
    r = lane("setup", coordinator.url, machine, env=env, stdin=cred.token + "\n")
    assert r.code == 3, r.err
    assert says in r.err and "lane-coordinator token add" in r.err
    assert "nothing was written" in r.err and _nothing_written(env)
    assert cred.token not in r.out + r.err


@pytest.mark.parametrize(
    ("cred", "says"),
    [
        (STUDIO_M, "'studio-m' (role driver), bound to this machine"),
        (ANY, "note: credential 'render-farm' (role driver) is bound to no machine"),
        (None, "warning: credential 'token-1' (role admin) acts for any machine"),
    ],
)
def test_setup_stores_a_driver_credential_and_says_what_it_is(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], cred: Cred | None, says: str
) -> None:
    env = dict(lane_env)
    token = cred.token if cred is not None else coordinator.token
    r = lane("setup", coordinator.url, "studio-m", env=env, stdin=token + "\n")
    assert r.code == 0, r.err
    assert says in r.err
    assert (Path(env["LANE_CONFIG_DIR"]) / "token").read_text().strip() == token


def _clipboard(tmp: Path) -> dict[str, str]:
    bindir = tmp / "bin"
    bindir.mkdir()
    xclip = bindir / "xclip"
    xclip.write_text(f"#!/bin/sh\ncat > {tmp}/clip\n")
    xclip.chmod(0o755)
    browser = bindir / "fake-browser"
    browser.write_text("#!/bin/sh\nexit 0\n")
    browser.chmod(0o755)
    return {"PATH": f"{bindir}:/usr/bin:/bin", "BROWSER": f"{browser} %s"}


def test_dashboard_prefers_the_read_token(
    coordinator: ThreadedCoordinator, lane_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**client_env(lane_env, coordinator.url, STUDIO_M.token, "studio-m"),
           **_clipboard(tmp_path)}  # fmt: skip
    r = lane("dashboard", env=env)
    assert r.code == 0, r.err
    assert (tmp_path / "clip").read_text() == STUDIO_M.token
    assert "driver credential: the control room will say it can write" in r.err
    assert "LANE_READ_TOKEN" in r.err
    r = lane("dashboard", env={**env, "LANE_READ_TOKEN": READER.token})
    assert r.code == 0, r.err
    assert (tmp_path / "clip").read_text() == READER.token
    assert "($LANE_READ_TOKEN) copied" in r.err and "can write" not in r.err
    assert READER.token not in r.out + r.err


@pytest.mark.parametrize("required", [False, True])
@pytest.mark.parametrize(
    ("cred", "machine", "code", "hint"),
    [
        (READER, "studio-m", "role-forbidden", "is not a driver credential"),
        (STUDIO_M, "studio-x", "machine-mismatch", "LANE_MACHINE_ID is not the machine"),
    ],
)
def test_a_forbidden_call_is_a_clear_error_and_pre_provider_when_required(
    coordinator: ThreadedCoordinator,
    lane_env: dict[str, str],
    required: bool,
    cred: Cred,
    machine: str,
    code: str,
    hint: str,
) -> None:
    env = client_env(lane_env, coordinator.url, cred.token, machine)
    if required:
        env["LANE_REQUIRED"] = "1"
    r = lane("acquire", "--lane", LANE, "--project", "p", "--scene", "s", "--prompt-hash", "h",
             env=env)  # fmt: skip
    assert r.code == (3 if required else 1), (r.code, r.err)
    assert code in r.err and hint in r.err, r.err
    if required:
        assert "pre-provider" in r.err
    assert cred.token not in r.out + r.err
