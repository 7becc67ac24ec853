"""The TypeScript client (clients/typescript, docs/client.md#typescript) from `make test`:
strict tsc, the no-cast check and the Node test runner (`npm test`) against a real
coordinator (the drill's steps 1-6 with two computers, an in-flight hold ended by reconcile,
a cooldown, the RFC 8785 vectors as verified receipts), and the checked-in types against the
live /openapi.json (drift)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator import __version__
from tests.harness import REPO, CoordinatorProcess
from tests.typescript.kit import PACKAGE, SCHEMA, ensure_node, run, ts_coordinator


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    ensure_node()
    srv = ts_coordinator(tmp_path_factory.mktemp("ts-coordinator"))
    yield srv
    srv.stop()


def test_npm_test_passes_against_a_real_coordinator(coordinator: CoordinatorProcess) -> None:
    done = run(["npm", "test"], LANE_COORDINATOR_URL=coordinator.url, LANE_TOKEN=coordinator.token)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    passed = re.search(r"^# pass (\d+)$", out, re.M)
    failed = re.search(r"^# fail (\d+)$", out, re.M)
    assert passed and failed, out[-3000:]
    assert int(failed.group(1)) == 0
    assert int(passed.group(1)) >= 30, out[-3000:]  # every file ran, the drill included
    assert "no-casts: no cast" in out
    for title in ("1. A acquires", "4. A releases", "6. a short lease", "an in-flight hold"):
        assert re.search(rf"^\s*ok \d+ - {re.escape(title)}", out, re.M), title
    assert coordinator.token not in out


def test_checked_in_types_are_the_live_document(
    coordinator: CoordinatorProcess, tmp_path: Path
) -> None:
    """Regenerated from the running coordinator's GET /openapi.json with the pinned
    openapi-typescript, the types are byte for byte the checked-in src/schema.ts."""
    fresh = tmp_path / "schema.ts"
    done = run(["node", "dev/generate.mjs", f"{coordinator.url}/openapi.json", str(fresh)])
    assert done.returncode == 0, done.stderr
    assert fresh.read_text(encoding="utf-8") == SCHEMA.read_text(encoding="utf-8"), (
        "clients/typescript/src/schema.ts is not what the live /openapi.json generates: run "
        "`make ts-schema` and commit the result (then fix what strict tsc reports)"
    )


def test_the_cast_check_finds_casts_and_any(tmp_path: Path) -> None:
    ensure_node()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.ts").write_text(
        "const x: unknown = 1;\n"
        "export const a = x as number;\n"
        "export const b = [1] as const;\n"
        "export const c: any = x;\n"
        "export const d = (x as { y?: number }).y!;\n"
        "// @ts-ignore\n"
        "export const e = <string>x;\n",
        encoding="utf-8",
    )
    done = run(["node", str(PACKAGE / "dev" / "no-casts.mjs"), str(tmp_path)])
    assert done.returncode == 1, done.stderr
    found = sorted(line.split(": ", 1)[1] for line in done.stderr.splitlines()[1:])
    assert found == sorted(
        [
            "cast `as number`",
            "the `any` type",
            "cast `as { y?: number }`",
            "non-null assertion `x!`",
            "@ts-ignore",
            "cast `<T>x`",
        ]
    ), done.stderr
    (tmp_path / "src" / "bad.ts").write_text("export const ok = [1] as const;\n", encoding="utf-8")
    assert run(["node", str(PACKAGE / "dev" / "no-casts.mjs"), str(tmp_path)]).returncode == 0


def test_the_package_version_is_the_repository_version() -> None:
    package = json.loads((PACKAGE / "package.json").read_text(encoding="utf-8"))
    assert package["version"] == __version__
    lock = json.loads((PACKAGE / "package-lock.json").read_text(encoding="utf-8"))
    assert lock["version"] == __version__ and lock["packages"][""]["version"] == __version__
    version_ts = (PACKAGE / "src" / "version.ts").read_text(encoding="utf-8")
    assert f'export const VERSION = "{__version__}";' in version_ts
    # every dependency pinned exactly (package-lock.json holds the rest of the tree)
    pins = package["devDependencies"]
    assert pins and all(re.fullmatch(r"\d+\.\d+\.\d+", v) for v in pins.values()), pins
    assert "dependencies" not in package  # the client itself needs nothing at run time


def _typescript_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```typescript\n(.*?)^```$", markdown, re.M | re.S)


def test_the_driver_guide_turn_is_the_example_the_tests_run() -> None:
    """docs/driver-guide.md's TypeScript turn is examples/turn.ts verbatim (which
    test/example.test.ts runs against the real coordinator), marked as run elsewhere."""
    guide = (REPO / "docs" / "driver-guide.md").read_text(encoding="utf-8")
    example = (PACKAGE / "examples" / "turn.ts").read_text(encoding="utf-8")
    blocks = _typescript_blocks(guide)
    assert blocks == [example]
    head = guide[: guide.index("```typescript\n" + example)].rstrip().splitlines()[-1]
    assert head.startswith('<!-- skip: next "TypeScript: this is clients/typescript/examples/')
    for doc in ("docs/client.md", "docs/driver-guide.md"):  # every TypeScript block is marked
        text = (REPO / doc).read_text(encoding="utf-8")
        marks = re.findall(r'^<!-- skip: next "[^"]+" -->\n```typescript$', text, re.M)
        assert len(marks) == len(_typescript_blocks(text)) >= 1, doc
