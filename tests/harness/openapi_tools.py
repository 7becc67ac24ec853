"""The judges of the OpenAPI document from other ecosystems (tools/openapi, installed by
scripts/ensure-node.sh): Redocly CLI's lint and ajv (tools/openapi/check-document.mjs),
run on a document (and recorded replies) a test hands them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.harness.config import REPO

TOOLS = REPO / "tools" / "openapi"
REDOCLY = TOOLS / "node_modules" / ".bin" / "redocly"
CHECK = TOOLS / "check-document.mjs"
NODE_ENV = {**os.environ, "REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"}


def _installed() -> None:
    assert REDOCLY.exists(), "the OpenAPI tools are not installed: run `make node-tools`"


def redocly_lint(doc: dict[str, Any], tmp: Path) -> tuple[int, dict[str, Any]]:
    """`redocly lint` with the repository's config: its exit code and its JSON report."""
    _installed()
    path = tmp / "openapi.json"
    path.write_text(json.dumps(doc))
    run = subprocess.run(
        [str(REDOCLY), "lint", "--config", str(TOOLS / "redocly.yaml"), "--format", "json",
         str(path)],
        capture_output=True, text=True, timeout=120, check=False, env=NODE_ENV, cwd=tmp,
    )  # fmt: skip
    report: dict[str, Any] = json.loads(run.stdout[run.stdout.index("{") :])
    return run.returncode, report


def ajv_check(
    doc: dict[str, Any], tmp: Path, replies: list[dict[str, Any]] | None = None
) -> tuple[int, dict[str, Any]]:
    """tools/openapi/check-document.mjs: its exit code and report."""
    _installed()
    path = tmp / "openapi.json"
    path.write_text(json.dumps(doc))
    args = ["node", str(CHECK), str(path)]
    if replies is not None:
        (tmp / "replies.json").write_text(json.dumps(replies))
        args.append(str(tmp / "replies.json"))
    run = subprocess.run(
        args, capture_output=True, text=True, timeout=120, check=False, env=NODE_ENV
    )
    assert run.returncode in (0, 1), run.stderr
    report: dict[str, Any] = json.loads(run.stdout)
    return run.returncode, report
