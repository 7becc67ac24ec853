"""Docs that run: every code block of README.md and docs/*.md runs against a real coordinator
on loopback, is a fragment by its tag, or is marked with why it cannot run here
(tests/docs/kit.py says which is which). One test per document; a new block that is none of
these fails it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from client.sync import SyncLaneClient
from coordinator.config import load_config
from tests.docs.kit import DOCS, DocRun, run_document, shell_env
from tests.harness import EXAMPLE_CONFIG, REPO, ThreadedCoordinator, clean_env

MACHINE = "doc-reader"


@pytest.fixture
def doc_server(tmp_path: Path) -> Iterator[ThreadedCoordinator]:
    """A fresh coordinator with the example config `make run` serves (routes seedance-direct,
    drill and self-test, capacity 1), the system clock."""
    server = ThreadedCoordinator(tmp_path / "data", config=load_config(EXAMPLE_CONFIG))
    yield server
    server.stop()


def _doc_id(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.mark.parametrize("doc", DOCS, ids=_doc_id)
def test_every_block_runs_or_says_why(
    doc: Path, doc_server: ThreadedCoordinator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = doc_server.env(clean_env(tmp_path), MACHINE)
    work = tmp_path / "work"  # a checkout's root, as the README's commands expect after make run
    (work / "var").mkdir(parents=True)
    (work / "var" / "dev-token").write_text(doc_server.token + "\n")
    (work / "var" / "dev-token").chmod(0o600)
    for key in [k for k in os.environ if k.startswith("LANE_")]:
        monkeypatch.delenv(key)
    monkeypatch.delenv("LANE_CLAIM", raising=False)  # load_settings() exports one: undone after
    for key, value in env.items():
        if key.startswith(("LANE_", "PYTHON_KEYRING")):
            monkeypatch.setenv(key, value)
    monkeypatch.chdir(work)
    run = DocRun(url=doc_server.url, env=shell_env(env), work=work)

    outcomes = run_document(doc, run)

    print("\n" + "\n".join(f"{o.where} [{o.language}] {o.status}" for o in outcomes))
    with SyncLaneClient(doc_server.url, doc_server.token, "doc-test-reader") as reader:
        # What runs as this computer (the library, `lane`, the example driver: configured by
        # LANE_*) cleans up after itself; a raw HTTP example names its own machineId.
        lanes = reader.lanes().lanes
        left = [
            (x.lane, t.ticket_id, t.state)
            for x in lanes
            for t in (lambda s: [*s.held, *s.queued])(reader.status(x.lane))
            if t.machine_id == MACHINE
        ]
        assert not left, f"{_doc_id(doc)}: its blocks left tickets behind: {left}"
        if any(o.language == "python" and o.status == "ran" for o in outcomes):
            ended = sum(len(reader.history(x.lane).entries) for x in lanes)
            assert ended, f"{_doc_id(doc)}: its Python blocks ran but took no turn on a lane"
