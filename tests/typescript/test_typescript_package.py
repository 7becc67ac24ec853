"""The TypeScript client as a user installs it: `npm pack` (what `make dist` puts in dist/)
makes lane-coordinator-client-<version>.tgz with the compiled JavaScript, its declarations
and the sources, and nothing else; installed into a fresh project (no registry needed: the
client has no run-time dependency) it imports under Node and type-checks a consumer with
strict tsc."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from coordinator import __version__
from tests.typescript.kit import PACKAGE, ensure_node, run

CONSUMER = """\
import { LaneClient, PreProviderError, contentHash, type LaneReply } from "lane-coordinator-client";

export function granted(reply: LaneReply): boolean {
  return reply.granted && reply.ticket.state === "held";
}
export const client = new LaneClient({
  url: "http://127.0.0.1:9", token: "t".repeat(32), machineId: "studio-a", required: true,
});
export const hash: string = contentHash({ refs: 3 });
export const isPre = (e: unknown): boolean => e instanceof PreProviderError;
"""
TSCONFIG = {
    "compilerOptions": {
        "target": "ES2022",
        "module": "NodeNext",
        "moduleResolution": "NodeNext",
        "strict": True,
        "noUncheckedIndexedAccess": True,
        "skipLibCheck": False,
        "noEmit": True,
        "types": [],
    },
    "include": ["consumer.ts"],
}


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ensure_node()
    out = tmp_path_factory.mktemp("npm-pack")
    done = run(["npm", "pack", "--silent", "--pack-destination", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    packed = sorted(out.glob("*.tgz"))
    assert [p.name for p in packed] == [f"lane-coordinator-client-{__version__}.tgz"], packed
    return packed[0]


def test_the_tarball_holds_the_built_client_and_nothing_else(tarball: Path) -> None:
    with tarfile.open(tarball) as tgz:
        names = {n.removeprefix("package/") for n in tgz.getnames()}
    for module in ("index", "client", "config", "decode", "errors", "jcs", "schema", "types"):
        assert {f"dist/{module}.js", f"dist/{module}.d.ts", f"src/{module}.ts"} <= names, module
    assert {"package.json", "README.md"} <= names
    assert {n.split("/")[0] for n in names} == {"dist", "src", "package.json", "README.md"}


def test_installed_it_imports_and_type_checks_a_consumer(tarball: Path, tmp_path: Path) -> None:
    project = tmp_path / "consumer"
    project.mkdir()
    (project / "package.json").write_text(
        json.dumps({"name": "consumer", "private": True, "type": "module"}), encoding="utf-8"
    )
    done = run(
        ["npm", "install", "--offline", "--no-audit", "--no-fund", str(tarball)], cwd=project
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed = json.loads(
        (project / "node_modules" / "lane-coordinator-client" / "package.json").read_text()
    )
    assert installed["version"] == __version__
    script = (
        "import * as lane from 'lane-coordinator-client';"
        "console.log(JSON.stringify([lane.VERSION, lane.PROTOCOL_VERSION, lane.SHARED_KINDS,"
        " lane.contentHash({ a: 1 }), typeof lane.LaneClient, typeof lane.connect]));"
    )
    done = run(["node", "--input-type=module", "-e", script], cwd=project)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        __version__,
        1,
        ["actor-sqlite", "actor-postgres"],
        # sha256 of the canonical bytes {"a":1}
        "sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862",
        "function",
        "function",
    ]
    (project / "consumer.ts").write_text(CONSUMER, encoding="utf-8")
    (project / "tsconfig.json").write_text(json.dumps(TSCONFIG), encoding="utf-8")
    tsc = PACKAGE / "node_modules" / ".bin" / "tsc"
    done = run([str(tsc), "-p", "tsconfig.json"], cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
