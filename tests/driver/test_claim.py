"""One claim per driver process (docs/protocol.md#client-config, docs/protocol.md#driver-rules):
minted once, sent on every call, exported to child processes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from client.config import ENV_CLAIM, connect, load_settings
from client.driver import Turn
from tests.harness import ThreadedCoordinator

from .kit import LANE, PY, REPO

CHILD = (
    "import os; from client.config import load_settings; "
    "s = load_settings(use_keyring=False); print(os.environ['LANE_CLAIM'], s.claim_id)"
)


async def test_one_claim_per_process_exported_to_children(
    coord: ThreadedCoordinator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_lane_env: None
) -> None:
    monkeypatch.setenv("LANE_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("LANE_COORDINATOR_URL", coord.url)
    monkeypatch.setenv("LANE_TOKEN", coord.token)
    monkeypatch.setenv("LANE_MACHINE_ID", "studio-a")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    settings = load_settings(use_keyring=False)
    claim = settings.claim_id
    assert claim is not None and len(claim) == 36  # a uuid4
    assert os.environ[ENV_CLAIM] == claim  # exported
    assert load_settings(use_keyring=False).claim_id == claim  # minted once per process

    child = subprocess.run([PY, "-c", CHILD], capture_output=True, text=True, check=True)
    assert child.stdout.split() == [claim, claim]  # a child call acts as the same driver

    backend = connect(settings)
    try:
        async with Turn(backend, LANE, "proj", "scene-1", "h1") as turn:
            assert turn.claim_id == claim
        e = (await backend.history(LANE)).entries[0]
        assert (e.machine_id, e.claim_id) == ("studio-a", claim)  # sent on every call
    finally:
        await backend.close()


def test_an_explicit_lane_claim_is_kept(tmp_path: Path, no_lane_env: None) -> None:
    env = {"LANE_CLAIM": "render-macbook-driver-7", "LANE_CONFIG_DIR": str(tmp_path)}
    assert load_settings(environ=env, use_keyring=False).claim_id == "render-macbook-driver-7"
    fresh: dict[str, str] = {"LANE_CONFIG_DIR": str(tmp_path)}
    minted = load_settings(environ=fresh, use_keyring=False).claim_id
    assert minted is not None and fresh[ENV_CLAIM] == minted
