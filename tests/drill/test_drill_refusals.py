"""`lane drill` refuses what it must never touch: the production account (whatever the flags
say), LANE_ACCOUNT's account, an unenforced lane, a coordinator that is not the shared one.
Each refusal exits non-zero and leaves no ticket behind."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.drill.kit import BIN, clean_env, drill, drill_coordinator, role_env
from tests.harness import CoordinatorProcess, fake_coordinator


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    c = drill_coordinator(tmp_path_factory.mktemp("refusals"))
    yield c
    c.stop()


@pytest.mark.parametrize(
    ("args", "extra_env", "lane", "expect"),
    [
        (["--lane", "drill:main-unlimited"], {}, "drill:main-unlimited", "production account"),
        (["--route", "drill", "--account", "main-unlimited"], {}, "drill:main-unlimited",
         "production account"),
        ([], {"LANE_ACCOUNT": "acceptance"}, "drill:acceptance", "LANE_ACCOUNT"),
        (["--lane", "drill:studio"], {"LANE_ACCOUNT": "studio"}, "drill:studio", "LANE_ACCOUNT"),
    ],
)  # fmt: skip
def test_production_accounts_are_refused(
    coordinator: CoordinatorProcess,
    tmp_path: Path,
    args: list[str],
    extra_env: dict[str, str],
    lane: str,
    expect: str,
) -> None:
    env = role_env(tmp_path, coordinator, "refuse-a", **extra_env)
    p = drill(env, "--role", "a", "--timeout", "5", *args)
    assert p.wait(120) == 1, p.text
    assert "drill refuses account" in p.text and expect in p.text, p.text
    assert "PASS" not in p.text
    # Nothing was acquired anywhere: neither the refused lane nor its barrier lane exists.
    files = {f.name for f in coordinator.data_dir.iterdir()}
    route, account = lane.split(":")
    assert f"{route}+{account}.sqlite" not in files
    assert f"{route}+{account}-barrier.sqlite" not in files
    assert coordinator.token not in p.text


def test_unenforced_lane_is_refused(coordinator: CoordinatorProcess, tmp_path: Path) -> None:
    env = role_env(tmp_path, coordinator, "refuse-b")
    p = drill(env, "--role", "b", "--lane", "free-route:acceptance", "--timeout", "5")
    assert p.wait(120) == 1, p.text
    assert "FAIL  step 0/7" in p.text and "is unenforced here" in p.text, p.text
    assert "PASS  step" not in p.text
    assert coordinator.status("free-route:acceptance-barrier")["enforced"] is False


async def test_non_shared_coordinator_is_refused(tmp_path: Path) -> None:
    """A server that answers like the local queue (coordinator: local-sqlite) is refused
    before anything is acquired: exit 3 (pre-provider), only status was asked."""
    server = fake_coordinator("local")
    env = clean_env(tmp_path)
    env.update(
        LANE_COORDINATOR_URL=server.url,
        LANE_TOKEN="fake-token-0123456789abcdefghijklmnopqrstuvwxyz",
        LANE_MACHINE_ID="refuse-c",
    )
    try:
        proc = await asyncio.create_subprocess_exec(
            str(BIN / "lane"), "drill", "--role", "a", "--timeout", "5",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        raw, _ = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        server.stop()
    text = raw.decode()
    assert proc.returncode == 3, text
    assert "not one of ['actor-postgres', 'actor-sqlite']" in text, text
    assert "not the shared coordinator" in text, text
    assert server.hits and set(server.hits) == {"/v1/lanes/status"}, server.hits
