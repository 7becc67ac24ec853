"""What a user installs: the wheel `make dist` builds. Built here from the repo (sdist, then
the wheel from the sdist, as `make dist` does) into a temp dir, installed into a FRESH venv
with only the registry for the runtime dependencies, then run from outside the repo:
`--version` of both commands, `lane-coordinator check` of the shipped production config,
a real `serve` (control room, static assets, migrations, the bearer API) and the installed
`lane` client against it. The dev tools (pytest, playwright, mypy, ...) must not come along.

uv's cache makes a second run quick (the first downloads the runtime dependencies)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from coordinator import __version__
from tests.harness import CoordinatorProcess

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "deploy" / "production-config.toml"
TOKEN = "dist-test-token-0123456789-abcdefghijklmn"  # >= 32 bytes
DEV_TOOLS = (
    "pytest", "playwright", "mypy", "hypothesis", "ruff", "openapi_spec_validator", "schemathesis",
)  # fmt: skip
# Inherited variables that would point the fresh venv's programs back at the dev setup.
SCRUBBED = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "CONDA_PREFIX")
START_TIMEOUT = 60.0
PROMPT_HASH = "sha256:" + "0" * 64


def find_uv() -> str:
    local = Path(sys.executable).parent / "uv"  # `make setup` puts it in the venv ...
    found = str(local) if local.exists() else shutil.which("uv")  # ... unless uv was on PATH
    assert found, "uv: neither in the project venv nor on PATH (make setup installs it)"
    return found


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("LANE_")}
    env.update(extra)
    return env


def run(
    cmd: list[str | Path], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None
) -> str:
    done = subprocess.run(
        [str(c) for c in cmd],
        cwd=cwd,
        env=clean_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{cmd}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class Installed:
    wheel: Path
    sdist: Path
    venv: Path
    work: Path  # the cwd for the installed programs: never the repo

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    base = tmp_path_factory.mktemp("dist")
    out, venv, work = base / "dist", base / "venv", base / "work"
    work.mkdir()
    uv = find_uv()
    run([uv, "build", "--python", sys.executable, "--out-dir", out, ROOT], cwd=ROOT, timeout=300)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    # A fresh venv from the standard venv module (the user's python3 -m venv); uv installs the
    # wheel and fetches only its runtime dependencies from the registry.
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    python = venv / "bin" / "python"
    run([uv, "pip", "install", "--python", python, wheels[0]], cwd=work, timeout=600)
    run([uv, "pip", "check", "--python", python], cwd=work)
    return Installed(wheel=wheels[0], sdist=sdists[0], venv=venv, work=work)


def test_artifacts_are_named_for_the_version(installed: Installed) -> None:
    assert installed.wheel.name == f"lane_coordinator-{__version__}-py3-none-any.whl"
    assert installed.sdist.name == f"lane_coordinator-{__version__}.tar.gz"


def test_wheel_ships_static_files_migrations_and_py_typed(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        metadata = whl.read(f"lane_coordinator-{__version__}.dist-info/METADATA").decode()
    shipped = [
        *(ROOT / "coordinator" / "http" / "static").iterdir(),
        *(ROOT / "coordinator" / "store" / "migrations").glob("*.sql"),
        ROOT / "coordinator" / "py.typed",
        ROOT / "client" / "py.typed",
    ]
    missing = [str(p.relative_to(ROOT)) for p in shipped if str(p.relative_to(ROOT)) not in names]
    assert not missing, missing
    assert {n.split("/")[0] for n in names} == {
        "coordinator",
        "client",
        f"lane_coordinator-{__version__}.dist-info",
    }
    assert f"Version: {__version__}\n" in metadata


def test_wheel_requires_only_the_runtime_dependencies(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        metadata = whl.read(f"lane_coordinator-{__version__}.dist-info/METADATA").decode()
    required = sorted(
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = sorted(d.replace("_", "-") for d in project["dependencies"])
    assert required == runtime


def test_installed_commands_print_the_version(installed: Installed) -> None:
    for prog in ("lane", "lane-coordinator"):
        assert run([installed.bin(prog), "--version"], cwd=installed.work) == (
            f"{prog} {__version__}\n"
        )


def test_installed_check_of_the_production_config(installed: Installed) -> None:
    out = run(
        [installed.bin("lane-coordinator"), "check", "--data-dir", installed.work / "check-data",
         "--config", PRODUCTION],
        cwd=installed.work,
        env={"LANE_COORDINATOR_TOKEN": TOKEN},
    )  # fmt: skip
    assert out.startswith("ok: config valid"), out
    assert "migrations apply cleanly" in out


def test_installed_venv_has_no_dev_tools(installed: Installed) -> None:
    probe = (
        "import importlib.util, json, coordinator, client; print(json.dumps({"
        "'coordinator': coordinator.__file__, 'client': client.__file__, "
        f"'dev': [m for m in {DEV_TOOLS!r} if importlib.util.find_spec(m)]}}))"
    )
    found = json.loads(run([installed.bin("python"), "-c", probe], cwd=installed.work))
    assert found["dev"] == []
    for package in ("coordinator", "client"):  # the installed copy, not the repo's
        assert Path(found[package]).is_relative_to(installed.venv), found[package]


@pytest.fixture(scope="module")
def served(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The installed `lane-coordinator serve` of the production config; its URL."""
    tmp_path = tmp_path_factory.mktemp("served")
    proc = CoordinatorProcess(
        tmp_path / "data",
        config=PRODUCTION,
        token=TOKEN,
        token_env=True,
        command=[str(installed.bin("lane-coordinator"))],
        env=clean_env(),
        cwd=installed.work,
        start_timeout=START_TIMEOUT,
    )
    try:
        yield proc.url
    finally:
        code = proc.stop()
    assert code == 0, proc.text


def get(url: str, token: str | None = None) -> tuple[int, str, bytes]:
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, resp.headers.get_content_type(), resp.read()


def lane_env(served: str, tmp_path: Path) -> dict[str, str]:
    """A computer configured by environment only (docs/client.md), its files in tmp_path."""
    return {
        "LANE_COORDINATOR_URL": served,
        "LANE_TOKEN": TOKEN,
        "LANE_MACHINE_ID": "dist-test",
        "LANE_REQUIRED": "1",
        "LANE_CONFIG_DIR": str(tmp_path / "lane-config"),
        "LANE_STATE_DIR": str(tmp_path / "lane-state"),
    }


def test_installed_coordinator_serves_the_control_room_and_api(served: str) -> None:
    assert get(f"{served}/healthz")[:2] == (200, "application/json")
    status, ctype, page = get(f"{served}/control-room")
    assert (status, ctype) == (200, "text/html")
    assert b"control-room.js" in page
    for asset, want in (("control-room.js", "text/javascript"), ("control-room.css", "text/css")):
        status, ctype, body = get(f"{served}/control-room/assets/{asset}")
        assert (status, ctype) == (200, want) and body
    status, _, body = get(f"{served}/openapi.json")
    assert json.loads(body)["info"]["version"] == __version__
    status, _, body = get(f"{served}/v1/lanes", token=TOKEN)
    assert status == 200 and json.loads(body)


def test_installed_lane_cli_against_the_installed_coordinator(
    installed: Installed, served: str, tmp_path: Path
) -> None:
    # acquire (the coordinator makes the lane file with the shipped migrations), status, release
    env = lane_env(served, tmp_path)

    def lane(*args: str) -> dict[str, Any]:
        out = run([installed.bin("lane"), *args, "--lane", "drill:dist-cli", "--json"],
                  cwd=installed.work, env=env)  # fmt: skip
        reply: dict[str, Any] = json.loads(out)
        return reply

    acquired = lane("acquire", "--project", "p", "--scene", "s", "--prompt-hash", PROMPT_HASH)
    ticket = acquired["ticket"]["ticketId"]
    assert (acquired["granted"], acquired["ticket"]["state"]) == (True, "held")
    assert [t["ticketId"] for t in lane("status")["held"]] == [ticket]
    lane("release", "--ticket", ticket)
    assert lane("status")["held"] == []


def test_installed_library_runs_the_example_driver(
    installed: Installed, served: str, tmp_path: Path
) -> None:
    # The driver helpers (Turn, journal, RFC 8785 receipts) from the installed library only.
    out = run(
        [installed.bin("python"), "-m", "client.example_driver", "--lane", "drill:dist-driver",
         "--render-seconds", "0.2", "--provider-dir", tmp_path / "provider"],
        cwd=installed.work,
        env=lane_env(served, tmp_path),
    )  # fmt: skip
    result = json.loads(out)
    assert (result["outcome"], result["released"], result["leaseLost"]) == (
        "completed",
        True,
        False,
    )
    assert "provider-terminal" in result["receipts"]["written"]


def _readme_block(containing: str) -> str:
    """The README's ```sh block that contains `containing` (read by sybil's lexer, as the docs
    run reads it: tests/docs/kit.py)."""
    from sybil import Document
    from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

    readme = ROOT / "README.md"
    doc = Document(readme.read_text(encoding="utf-8"), str(readme))
    lexer = FencedCodeBlockLexer("sh", mapping={"source": "source"})
    blocks = [str(r.lexemes["source"]) for r in lexer(doc) if containing in r.lexemes["source"]]
    assert len(blocks) == 1, f"README: {len(blocks)} sh blocks with {containing!r}"
    return blocks[0]


def test_readme_tool_install_works_where_the_readme_leaves_you(
    installed: Installed, tmp_path: Path
) -> None:
    """The README's `uv tool install` block, run as written from a checkout's root after
    `make dist` (the wheel in dist/), installs `lane` as a tool that prints the version."""
    checkout = tmp_path / "checkout"
    (checkout / "dist").mkdir(parents=True)
    shutil.copy(installed.wheel, checkout / "dist" / installed.wheel.name)
    tools, bins = tmp_path / "uv-tools", tmp_path / "uv-bin"
    path = f"{bins}{os.pathsep}{Path(find_uv()).parent}{os.pathsep}{os.environ['PATH']}"
    out = run(
        ["bash", "-c", "set -euo pipefail\n" + _readme_block("uv tool install")],
        cwd=checkout,
        timeout=600,
        env={"UV_TOOL_DIR": str(tools), "UV_TOOL_BIN_DIR": str(bins), "PATH": path},
    )
    assert f"lane {__version__}" in out, out
    assert (bins / "lane").exists() and (bins / "lane-coordinator").exists()
