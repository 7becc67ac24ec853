"""The repository is self-contained: what a user gets from `git clone` is all there is.

Rules (every file git tracks or is about to track, i.e. `git ls-files --cached --others
--exclude-standard`):

1. No file names the workspace outside the checkout: the sibling `shared` folder through a
   relative climb, or the workspace root as an absolute path.
2. Outside tests/ (whose inputs include path-traversal strings on purpose), no relative
   climb leaves the repository: a Markdown file may climb to the repository root (its links
   are relative to it), any other file not at all; no absolute home-directory paths either.
3. Python never climbs above the repository from `__file__` (`.parents[N]`, `.parent` chains).
4. Every relative link in a Markdown file resolves to a file or folder inside the repository,
   and a `#anchor` on a Markdown file to one of its headings or explicit `<a id>` anchors.
5. No Markdown file mentions the internal contract (the word SPEC): users do not have it;
   docs/protocol.md is the reference.
6. No user-visible string mentions it either: string literals (not docstrings or comments) in
   client/ and coordinator/, the control-room page, deploy/, every `lane` and
   `lane-coordinator` help text, and the served OpenAPI document.
7. The RFC 8785 vectors exist once, in tests/data/jcs_vectors.

The needles are built from parts so this file never matches itself.
"""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
from contextlib import redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------- needles (built from parts)

UP = ".." + "/"
SHARED_NEEDLES = (UP + "shared", "/" + "work" + "/")
HOME_RE = re.compile("(?<![\\w.~])/" + "(?:home|Users|root)/")
CLIMB_RE = re.compile(r"(?<![\w.])((?:" + re.escape(UP) + r")+)")
CONTRACT_WORD = "S" + "PEC"
CONTRACT_RE = re.compile(r"\b" + CONTRACT_WORD + r"\b")
MD_LINK_RE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
MD_REF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
PARENTS_RE = re.compile(r"__file__\)(?:\.resolve\(\)|\.absolute\(\))?\.parents\[(\d+)\]")
PARENT_CHAIN_RE = re.compile(r"__file__\)(?:\.resolve\(\)|\.absolute\(\))?((?:\.parent\b)+)")

SKIP_DIRS = {".git", ".venv", "var", "dist", "build", "__pycache__", "node_modules"}


def _repo_files() -> list[Path]:
    """Tracked files plus new, not-ignored ones (deleted ones skipped); a plain walk when the
    tree is not a git checkout (an unpacked sdist)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
        files = [ROOT / n for n in names]
    except (OSError, subprocess.CalledProcessError):
        files = [
            p
            for p in ROOT.rglob("*")
            if p.is_file()
            and not any(part in SKIP_DIRS or part.endswith("_cache") for part in p.parts)
        ]
    return [p for p in files if p.is_file()]


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


FILES = _repo_files()
TEXTS: dict[str, str] = {
    p.relative_to(ROOT).as_posix(): t for p in FILES if (t := _text(p)) is not None
}


def _lines(text: str, pattern: re.Pattern[str] | str) -> list[str]:
    hits = []
    for n, line in enumerate(text.splitlines(), 1):
        found = pattern.search(line) if isinstance(pattern, re.Pattern) else pattern in line
        if found:
            hits.append(f"{n}: {line.strip()[:120]}")
    return hits


def test_the_file_list_is_real() -> None:
    assert "README.md" in TEXTS and "docs/protocol.md" in TEXTS
    assert "tests/unit/test_self_contained.py" in TEXTS
    assert len(TEXTS) > 50


# ---------------------------------------------------------------- 1-3: nothing outside the repo


def test_no_file_names_the_workspace_outside_the_repo() -> None:
    bad = {
        f"{name}:{hit}"
        for name, text in TEXTS.items()
        for needle in SHARED_NEEDLES
        for hit in _lines(text, needle)
    }
    assert not bad, "files that point outside the repository:\n" + "\n".join(sorted(bad))


def test_no_relative_climb_or_home_path_outside_tests() -> None:
    bad = []
    for name, text in TEXTS.items():
        if name.startswith("tests/"):
            continue
        depth = name.count("/")
        for n, line in enumerate(text.splitlines(), 1):
            for m in CLIMB_RE.finditer(line):
                # Markdown links are relative to the file: docs/client.md may link ../README.md.
                # Anywhere else (scripts, configs, code) the working directory is the repo.
                allowed = depth if name.endswith(".md") else 0
                if m.group(1).count(UP) > allowed:
                    bad.append(f"{name}:{n}: {line.strip()[:120]}")
        bad += [f"{name}:{hit}" for hit in _lines(text, HOME_RE)]
    assert not bad, "paths that leave the repository:\n" + "\n".join(bad)


def test_python_never_climbs_above_the_repo_from_its_own_file() -> None:
    bad = []
    for name, text in TEXTS.items():
        if not name.endswith(".py"):
            continue
        depth = name.count("/")  # parents[depth] is the repository root
        ups = [int(m.group(1)) for m in PARENTS_RE.finditer(text)]
        ups += [m.group(1).count(".parent") - 1 for m in PARENT_CHAIN_RE.finditer(text)]
        bad += [f"{name}: climbs {n} levels above its folder" for n in ups if n > depth]
    assert not bad, "\n".join(bad)


EXPLICIT_ANCHOR_RE = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, -N for
    repeats; plus explicit `<a id="...">` (or `name`) anchors, the stable ones. Neither
    counts inside a fenced code block."""
    seen: dict[str, int] = {}
    explicit: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            explicit.update(EXPLICIT_ANCHOR_RE.findall(line))
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or m is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            seen[f"{slug}-{n}"] = 1
    return set(seen) | explicit


def test_markdown_links_stay_inside_the_repo_and_exist() -> None:
    bad = []
    for name, text in TEXTS.items():
        if not name.endswith(".md"):
            continue
        here = (ROOT / name).parent
        for target in MD_LINK_RE.findall(text) + MD_REF_RE.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # a URL or mailto:
            path, _, anchor = target.partition("#")
            if not path:  # an anchor on the same page
                resolved = ROOT / name
            else:
                base = ROOT / path.lstrip("/") if path.startswith("/") else here / path
                resolved = base.resolve()
                if not resolved.is_relative_to(ROOT):
                    bad.append(f"{name}: link {target!r} leaves the repository")
                    continue
                if not resolved.exists():
                    bad.append(f"{name}: link {target!r} points at nothing")
                    continue
            if (
                anchor
                and resolved.suffix == ".md"
                and resolved.is_file()
                and anchor not in _anchors(resolved.read_text(encoding="utf-8"))
            ):
                bad.append(f"{name}: link {target!r}: no heading with that anchor")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------- 5-6: no internal contract


def test_no_markdown_mentions_the_internal_contract() -> None:
    bad = [
        f"{name}:{hit}"
        for name, text in TEXTS.items()
        if name.endswith(".md")
        for hit in _lines(text, CONTRACT_RE)
    ]
    assert not bad, "Markdown that sends users to a contract they do not have:\n" + "\n".join(bad)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                ids.add(id(body[0].value))
    return ids


def test_no_user_visible_string_in_the_code_mentions_the_contract() -> None:
    bad = []
    for name, text in TEXTS.items():
        if not (name.startswith(("client/", "coordinator/")) and name.endswith(".py")):
            continue
        tree = ast.parse(text, filename=name)
        docs = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docs
                and CONTRACT_RE.search(node.value)
            ):
                bad.append(f"{name}:{node.lineno}: {node.value[:100]!r}")
    assert not bad, "strings a user sees that name the internal contract:\n" + "\n".join(bad)


def _strip_js_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("//"))


def test_page_and_deploy_files_do_not_mention_the_contract() -> None:
    bad = []
    for name, text in TEXTS.items():
        if name.startswith("deploy/") or name.startswith("coordinator/http/static/"):
            body = _strip_js_comments(text) if name.endswith(".js") else text
            bad += [f"{name}:{hit}" for hit in _lines(body, CONTRACT_RE)]
    assert not bad, "\n".join(bad)


def _help_texts(parser: object) -> list[str]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    out = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _help_texts(sub)
    return out


@pytest.mark.parametrize("module", ["client.cli", "coordinator.cli"])
def test_cli_help_does_not_mention_the_contract(module: str) -> None:
    import importlib

    mod = importlib.import_module(module)
    with redirect_stdout(io.StringIO()):
        texts = _help_texts(mod.build_parser())
    bad = [hit for t in texts for hit in _lines(t, CONTRACT_RE)]
    assert not bad, f"{module} help:\n" + "\n".join(bad)


def test_openapi_document_does_not_mention_the_contract() -> None:
    from coordinator.http.openapi import openapi_bytes

    doc = openapi_bytes().decode("utf-8")
    json.loads(doc)
    assert not CONTRACT_RE.search(doc), _lines(doc, CONTRACT_RE)


# ---------------------------------------------------------------- 7: one copy of the vectors


def test_jcs_vectors_live_once_in_tests_data() -> None:
    folders = {
        Path(name).parents[1].as_posix()
        for name in TEXTS
        if re.search(r"(^|/)jcs[_-]vectors/(input|output)/", name)
    }
    assert folders == {"tests/data/jcs_vectors"}, folders
