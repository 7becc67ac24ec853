"""Fail-closed (LANE_REQUIRED=1): every cause is a PreProviderError / CLI exit 3, never a
local fallback, never a token in a message or traceback."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from client.api import LaneClient
from client.config import connect, load_settings
from client.errors import (
    CoordinatorTimeoutError,
    CoordinatorUnreachableError,
    LaneClientError,
    MalformedReplyError,
    PreProviderError,
    UnauthorizedError,
    UnavailableError,
)
from client.local import LocalQueue
from tests.client.kit import lane, shared_env
from tests.harness import AppThread, ThreadedCoordinator

LANE = "render:main"
SECRET = "s3cret-token-that-must-never-appear-0123456789"


def assert_clean(exc: BaseException, token: str = SECRET) -> None:
    """No token in the message, repr or a printed traceback; no chained aiohttp error."""
    text = "".join(traceback.format_exception(exc))
    assert token not in text and token not in repr(exc) and token not in str(exc)
    assert exc.__cause__ is None and (exc.__context__ is None or exc.__suppress_context__)


async def expect_pre_provider(client: LaneClient, needle: str) -> PreProviderError:
    with pytest.raises(PreProviderError) as ei:
        await client.status(LANE)
    assert needle in ei.value.cause, ei.value.cause
    assert_clean(ei.value)
    return ei.value


async def test_silent_socket_times_out(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}"
    async with LaneClient(url, SECRET, "studio-a", timeout=0.5, required=True) as c:
        started = time.monotonic()
        err = await expect_pre_provider(c, "timeout")
        assert time.monotonic() - started < 30
        assert isinstance(err.underlying, CoordinatorTimeoutError)
        # await gets its own timeout: waitSeconds + margin, not the 0.5 s per-call one.
        started = time.monotonic()
        with pytest.raises(PreProviderError) as ei:
            await c.await_ticket(LANE, "t_x", wait_seconds=1)
        assert time.monotonic() - started >= 1.4
        assert "within 1.5 s" in ei.value.cause
    async with LaneClient(url, SECRET, "studio-a", timeout=0.5) as loose:
        with pytest.raises(CoordinatorTimeoutError) as te:
            await loose.status(LANE)
        assert not isinstance(te.value, PreProviderError)


async def test_connection_refused(refused_port: int) -> None:
    url = f"http://127.0.0.1:{refused_port}"
    async with LaneClient(url, SECRET, "studio-a", required=True, timeout=1.0) as c:
        err = await expect_pre_provider(c, "unreachable")
        assert isinstance(err.underlying, CoordinatorUnreachableError)
    async with LaneClient(url, SECRET, "studio-a", timeout=1.0) as loose:
        with pytest.raises(CoordinatorUnreachableError):
            await loose.acquire(LANE, "p", "s", "h")


async def test_real_coordinator_wrong_token(coordinator: ThreadedCoordinator) -> None:
    async with LaneClient(coordinator.url, SECRET, "studio-a", required=True) as c:
        err = await expect_pre_provider(c, "unauthorized (HTTP 401)")
        assert err.status == 401 and isinstance(err.underlying, UnauthorizedError)
    async with LaneClient(coordinator.url, SECRET, "studio-a") as loose:
        with pytest.raises(UnauthorizedError) as ei:
            await loose.status(LANE)
        assert ei.value.status == 401
        assert_clean(ei.value)


@pytest.mark.parametrize(
    ("kind", "needle", "loose_error"),
    [
        ("unauthorized", "unauthorized (HTTP 401)", UnauthorizedError),
        ("garbage", "not JSON", MalformedReplyError),
        ("forbidden", "HTTP 403", MalformedReplyError),
        ("error500", "HTTP 503", UnavailableError),
    ],
)
async def test_fake_servers(
    fake: Callable[[str], AppThread], kind: str, needle: str, loose_error: type[LaneClientError]
) -> None:
    s = fake(kind)
    async with LaneClient(s.url, SECRET, "studio-a", required=True, timeout=1.0) as c:
        await expect_pre_provider(c, needle)
    async with LaneClient(s.url, SECRET, "studio-a", timeout=1.0) as loose:
        with pytest.raises(loose_error) as ei:
            await loose.status(LANE)
        assert not isinstance(ei.value, PreProviderError)
        assert_clean(ei.value)


async def test_not_the_shared_coordinator(fake: Callable[[str], AppThread]) -> None:
    s = fake("local")
    async with LaneClient(s.url, SECRET, "studio-a", required=True) as c:
        await expect_pre_provider(
            c, "'local-sqlite', not one of ['actor-postgres', 'actor-sqlite']"
        )
    async with LaneClient(s.url, SECRET, "studio-a") as loose:
        st = await loose.status(LANE)  # not required: answered, and says what it is
        assert st.coordinator == "local-sqlite"


async def test_replicas_on_postgres_are_a_shared_coordinator(
    fake: Callable[[str], AppThread],
) -> None:
    s = fake("postgres")  # replicas on PostgreSQL report actor-postgres: shared, not refused
    async with LaneClient(s.url, SECRET, "studio-a", required=True) as c:
        st = await c.status(LANE)
        assert st.coordinator == "actor-postgres"


async def test_malformed_shape_is_pre_provider(fake: Callable[[str], AppThread]) -> None:
    s = fake("local")  # its body is a status shape: as an acquire reply it is malformed
    async with LaneClient(s.url, SECRET, "studio-a", required=False) as loose:
        with pytest.raises(MalformedReplyError) as ei:
            await loose.acquire(LANE, "p", "s", "h")
        assert "does not match the protocol" in ei.value.message


def test_missing_config_never_falls_back(tmp_path: Path) -> None:
    state = tmp_path / "state"
    base = {"LANE_REQUIRED": "1", "LANE_STATE_DIR": str(state), "LANE_CONFIG_DIR": str(tmp_path)}
    cases = [
        ({}, "LANE_COORDINATOR_URL is unset"),
        ({"LANE_COORDINATOR_URL": "http://127.0.0.1:9", "LANE_MACHINE_ID": "m"}, "LANE_TOKEN"),
        ({"LANE_COORDINATOR_URL": "http://127.0.0.1:9", "LANE_TOKEN": SECRET}, "LANE_MACHINE_ID"),
    ]
    for extra, needle in cases:
        env = {**base, **extra}
        settings = load_settings(environ=env, use_keyring=False)
        with pytest.raises(PreProviderError) as ei:
            connect(settings)
        assert needle in ei.value.cause
        assert_clean(ei.value)
    assert not state.exists()  # the local queue was never opened


def test_not_required_missing_url_uses_local(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"LANE_STATE_DIR": str(tmp_path / "state"), "LANE_CONFIG_DIR": str(tmp_path)}
    backend = connect(load_settings(environ=env, use_keyring=False))
    assert isinstance(backend, LocalQueue) and backend.kind == "local-sqlite"
    assert "local single-computer queue" in capsys.readouterr().err


def test_constructor_refuses_missing_config_when_required() -> None:
    with pytest.raises(PreProviderError) as ei:
        LaneClient("", "", "studio-a", required=True)
    assert "LANE_COORDINATOR_URL" in ei.value.cause and "LANE_TOKEN" in ei.value.cause


# ---------------------------------------------------------------- the CLI: exit 3, no fallback


def _cli_required(lane_env: dict[str, str], url: str, token: str = SECRET) -> dict[str, str]:
    env = dict(lane_env)
    env.update(
        LANE_REQUIRED="1",
        LANE_COORDINATOR_URL=url,
        LANE_TOKEN=token,
        LANE_MACHINE_ID="studio-a",
        LANE_TIMEOUT_SECONDS="1",
    )
    return env


def _assert_exit3(run_args: list[str], env: dict[str, str], needle: str) -> None:
    r = lane(*run_args, env=env)
    assert r.code == 3, (r.code, r.out, r.err)
    assert needle in r.err, r.err
    assert "pre-provider" in r.err
    assert SECRET not in r.out + r.err
    assert "Traceback" not in r.err
    assert not Path(env["LANE_STATE_DIR"]).exists()  # never the local queue


def test_cli_exit_3_for_every_cause(
    lane_env: dict[str, str],
    silent_port: int,
    refused_port: int,
    fake: Callable[[str], AppThread],
    coordinator: ThreadedCoordinator,
) -> None:
    status = ["status", "--lane", LANE, "--json"]
    acquire = ["acquire", "--lane", LANE, "--project", "p", "--scene", "s", "--prompt-hash", "h"]
    _assert_exit3(status, _cli_required(lane_env, f"http://127.0.0.1:{silent_port}"), "timeout")
    _assert_exit3(
        acquire, _cli_required(lane_env, f"http://127.0.0.1:{refused_port}"), "unreachable"
    )
    _assert_exit3(status, _cli_required(lane_env, coordinator.url), "unauthorized (HTTP 401)")
    _assert_exit3(status, _cli_required(lane_env, fake("unauthorized").url), "HTTP 401")
    _assert_exit3(status, _cli_required(lane_env, fake("garbage").url), "not JSON")
    _assert_exit3(status, _cli_required(lane_env, fake("local").url), "'local-sqlite'")
    missing = dict(lane_env, LANE_REQUIRED="1")
    _assert_exit3(status, missing, "LANE_COORDINATOR_URL is unset")
    no_token = dict(lane_env, LANE_REQUIRED="1", LANE_COORDINATOR_URL=coordinator.url,
                    LANE_MACHINE_ID="studio-a")  # fmt: skip
    _assert_exit3(acquire, no_token, "LANE_TOKEN")
    no_account = _cli_required(lane_env, coordinator.url, coordinator.token)
    _assert_exit3(["status", "--route", "render"], no_account, "needs --account or LANE_ACCOUNT")


def test_cli_not_required_errors_exit_1(lane_env: dict[str, str], refused_port: int) -> None:
    env = dict(lane_env, LANE_COORDINATOR_URL=f"http://127.0.0.1:{refused_port}",
               LANE_TOKEN=SECRET, LANE_MACHINE_ID="studio-a", LANE_TIMEOUT_SECONDS="1")  # fmt: skip
    r = lane("status", "--lane", LANE, env=env)
    assert r.code == 1 and "unreachable" in r.err and SECRET not in r.out + r.err
    assert not Path(env["LANE_STATE_DIR"]).exists()  # a URL is set: no local queue either


def test_cli_ok_against_real_coordinator_when_required(
    lane_env: dict[str, str], coordinator: ThreadedCoordinator
) -> None:
    env = shared_env(lane_env, coordinator)
    env["LANE_REQUIRED"] = "1"
    r = lane("status", "--lane", LANE, "--json", env=env)
    assert r.code == 0, r.err
    assert r.json()["coordinator"] == "actor-sqlite"
    assert coordinator.token not in r.out + r.err


@pytest.mark.parametrize(
    "url",
    [
        "http://user:pw@127.0.0.1:8787",  # aiohttp: "Cannot combine AUTHORIZATION header ..."
        "http://127.0.0.1:99999",  # port out of range
        "http://[::1",  # invalid IPv6 literal
        "http://:8787",  # no host
        "ftp://127.0.0.1:8787",
    ],
)
def test_invalid_url_is_config_error_not_a_crash(url: str) -> None:
    with pytest.raises(PreProviderError) as ei:
        LaneClient(url, SECRET, "studio-a", required=True)
    assert "LANE_COORDINATOR_URL" in ei.value.cause
    assert "pw" not in str(ei.value)
    with pytest.raises(LaneClientError) as e2:
        LaneClient(url, SECRET, "studio-a", required=False)
    assert e2.value.code == "config"


def test_cli_invalid_url_exit_3_when_required(lane_env: dict[str, str]) -> None:
    for url in ("http://user:pw@127.0.0.1:8787", "http://127.0.0.1:99999", "http://[::1"):
        env = _cli_required(lane_env, url)
        _assert_exit3(["status", "--lane", LANE], env, "LANE_COORDINATOR_URL")
        r = lane("status", "--lane", LANE, env=dict(env, LANE_REQUIRED="0"))
        assert r.code == 1 and "unexpected error" not in r.err, r.err
