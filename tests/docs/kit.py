"""The docs run: every fenced code block of README.md and docs/*.md, read by sybil.

Each block is one of:

- **run** — ```python (executed in-process by sybil's evaluator, one namespace per document,
  with LANE_COORDINATOR_URL, LANE_TOKEN, LANE_MACHINE_ID, ... pointing at the test server),
  ```sh (bash -euo pipefail in a scratch directory, `lane` and `python` from this venv on PATH,
  the same LANE_* environment; the dev server's address http://127.0.0.1:8787 becomes the test
  server's, and `var/dev-token` holds its token, so README's curl works as after `make run`),
  ```toml (a config excerpt: loaded by the coordinator's own config reader);
- **a fragment by its tag** — ```text (output samples, synopses, diagrams in text), ```ini,
  ```yaml, ```json, ```mermaid: shown, never run;
- **marked** — `<!-- skip: next "why" -->` (sybil's skip directive) just before the block:
  a command for another machine (the server host, a second computer, the production database);
  the reason is required.

Any other block fails the document's test: a new block either runs or says why not.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from unittest import SkipTest

from sybil import Document, Example, Region
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import FencedCodeBlockLexer

from coordinator.config import load_config
from coordinator.errors import ConfigError
from tests.harness import BIN, REPO

DOCS: tuple[Path, ...] = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
RUN_LANGUAGES = ("python", "sh", "toml")
FRAGMENT_LANGUAGES = frozenset({"text", "ini", "yaml", "json", "mermaid"})
DEV_URL = "http://127.0.0.1:8787"  # `make run`'s address, as the README writes it
SHELL_TIMEOUT = 180.0


@dataclass
class Outcome:
    """What became of one block: ran, a fragment (by its tag) or skipped (with the reason)."""

    where: str  # docs/client.md:66
    language: str
    status: str


@dataclass
class DocRun:
    """One document's run: where its shell blocks run and what each block became."""

    url: str  # the test server
    env: dict[str, str]  # the shell blocks' environment
    work: Path  # the shell blocks' working directory
    outcomes: list[Outcome] = field(default_factory=list)

    def record(self, example: Example, language: str, status: str) -> None:
        where = f"{Path(example.path).relative_to(REPO)}:{example.line}"
        self.outcomes.append(Outcome(where, language, status))


def _language(example: Example) -> str:
    return str(example.region.lexemes.get("arguments", ""))


class Python:
    """sybil's Python evaluator, recorded."""

    def __init__(self, run: DocRun) -> None:
        self.run = run
        self.inner = PythonEvaluator()

    def __call__(self, example: Example) -> str | None:
        self.inner(example)
        self.run.record(example, "python", "ran")
        return None


class Shell:
    """A ```sh block in bash, against the test server (see the module docstring)."""

    def __init__(self, run: DocRun) -> None:
        self.run = run

    def __call__(self, example: Example) -> str | None:
        source = str(example.parsed).replace(DEV_URL, self.run.url)
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + source],
            cwd=self.run.work,
            env=self.run.env,
            capture_output=True,
            text=True,
            timeout=SHELL_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            return (
                f"exit {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
                f"--- stderr\n{done.stderr[-4000:]}"
            )
        self.run.record(example, "sh", "ran")
        return None


class Toml:
    """A ```toml block: a config excerpt the coordinator must accept as written."""

    def __init__(self, run: DocRun) -> None:
        self.run = run

    def __call__(self, example: Example) -> str | None:
        with tempfile.TemporaryDirectory(prefix="doc-config-") as tmp:
            path = Path(tmp) / "config.toml"
            path.write_text(str(example.parsed), encoding="utf-8")
            try:
                load_config(path)
            except ConfigError as exc:
                return f"the coordinator refuses this config: {exc}"
        self.run.record(example, "toml", "ran")
        return None


class OtherBlocks:
    """Every fenced block the running parsers do not take (any other tag, or none): a
    fragment when its tag says so, else a failure — unless a skip directive precedes it."""

    def __init__(self, run: DocRun) -> None:
        self.run = run
        self.lexer = FencedCodeBlockLexer(
            language=r"[^\n]*", mapping={"language": "arguments", "source": "source"}
        )

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.lexer(document):
            if region.lexemes["arguments"] in RUN_LANGUAGES:
                continue
            region.parsed = region.lexemes["source"]
            region.evaluator = self.evaluate
            yield region

    def evaluate(self, example: Example) -> str | None:
        language = _language(example)
        if language in FRAGMENT_LANGUAGES:
            self.run.record(example, language, "fragment")
            return None
        tag = f"```{language}" if language else "``` (no tag)"
        return (
            f"{tag}: this block neither runs nor says why. Tag a fragment "
            f"({', '.join(sorted(FRAGMENT_LANGUAGES))}), make it a runnable "
            f"{'/'.join(RUN_LANGUAGES)} block, or precede it with "
            '<!-- skip: next "why it cannot run here" -->'
        )


class ReasonedSkip(SkipParser):
    """sybil's skip directive, with its reason required (`skip: next "why"`)."""

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            action, reason = region.parsed
            if action in ("next", "start") and not (reason and reason.strip()):
                line = document.line_column(region.start)
                raise ValueError(f"{document.path}, {line}: `skip: {action}` needs a reason")
            yield region


def parse(path: Path, run: DocRun) -> Document:
    return Document.parse(
        str(path),
        CodeBlockParser("python", Python(run)),
        CodeBlockParser("sh", Shell(run)),
        CodeBlockParser("toml", Toml(run)),
        OtherBlocks(run),
        ReasonedSkip(),
    )


def run_document(path: Path, run: DocRun) -> list[Outcome]:
    """Evaluate every example of the document in order (skips recorded with their reason);
    the first failure raises sybil's SybilFailure naming the file and line."""
    document = parse(path, run)
    for example in document.examples():
        try:
            example.evaluate()
        except SkipTest as skipped:
            run.record(example, _language(example), f"skipped: {skipped}")
    return run.outcomes


def shell_env(base: dict[str, str]) -> dict[str, str]:
    """`base` with this venv's programs (`lane`, `lane-coordinator`, `python`) first on PATH."""
    return {**base, "PATH": f"{BIN}{os.pathsep}{base.get('PATH', os.defpath)}"}
