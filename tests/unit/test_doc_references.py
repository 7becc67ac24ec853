"""What the comments, docstrings and docs name exists: the description matches the house.

Rules (the files of test_self_contained's list; CHANGELOG.md only its "Unreleased" section,
released entries are history; migration SQL is never edited, so it is left out):

1. Every repository path in prose — `coordinator/actor/pipelined.py`, `client/driver/`,
   `scripts/drill.sh`, optionally with a `:function` suffix — is a file or folder of the
   checkout (a `*` in it is a glob that must match something). A bare module file name
   (`committer.py`, `refusals.py`) is the name of some file of the checkout.
2. Every dotted module name in a comment, a docstring or a Markdown file —
   `coordinator.store.sqlite`, `client.api`, optionally with `:function` or `.Class` — names a
   module or package of the checkout, and the name after it (if any) is defined in that
   module or is a submodule. Dotted names the code itself uses as strings (log events and
   logger names such as `coordinator.started`) and file names (`client.env`) are not modules.
3. Every `protocol.md#anchor`, in a link or in a comment, names an anchor of
   docs/protocol.md: an explicit `<a id="...">` or a heading's slug.
4. No file cites the internal contract by section number; docs/protocol.md is the
   reference (its anchors are stable).

The needles are built from parts so this file never matches itself.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.unit.test_self_contained import CONTRACT_WORD, ROOT, TEXTS, _anchors, _docstring_nodes

TOP = ("coordinator", "client", "tests", "bench", "scripts", "docs", "deploy")
PACKAGES = ("coordinator", "client", "tests", "bench")
SEGMENT = r"[\w@*+-]+(?:\.[\w@*+-]+)*"
PATH_RE = re.compile(
    r"(?<![\w./@-])((?:" + "|".join(TOP) + r")/(?:" + SEGMENT + r"(?:/" + SEGMENT + r")*/?)?)"
    r"(?!<)(?::(\w+))?"  # (a path followed by `<`: a template such as test_<module>.py)
)
DOTTED_RE = re.compile(
    r"(?<![\w./@-])((?:" + "|".join(PACKAGES) + r")(?:\.\w+)+)(?::(\w+))?(?![\w/-])"
)
BARE_PY_RE = re.compile(r"(?<![\w./@*-])(\w+\.py)\b")
ANCHOR_RE = re.compile(r"protocol\.md#([\w-]+)")
SECTION_RE = re.compile(r"\b" + CONTRACT_WORD + r"\s*(?:\u00a7|\d)")
RENAME_RE = re.compile(r"`[^`]+`(?=\s+is\s+now\b)|(?<=instead of )`[^`]+`")
NOT_MODULES = {"md", "env", "toml", "json", "com", "txt", "sh", "service", "conf", "db", "js"}
THIS = "tests/unit/test_doc_references.py"


# ---------------------------------------------------------------- what the files say


# Each function below keeps a file's line numbers: what it leaves out becomes empty lines.


def _changelog_unreleased(text: str) -> str:
    """The "Unreleased" section only: released entries are history and stay as written. A
    rename note keeps its old name (`` `x` is now `y` ``, ``instead of `x` ``): it is
    blanked out here."""
    m = re.search(r"^## \[Unreleased\].*?(?=^## \[)", text, re.MULTILINE | re.DOTALL)
    if m is None:
        return ""
    section = RENAME_RE.sub("``", m.group(0))
    return "\n" * text.count("\n", 0, m.start()) + section


def _python_prose(text: str, name: str) -> str:
    """A Python file's comments and docstrings (code and other strings left out:
    `coordinator.url` there is an attribute, not a module)."""
    lines = [""] * (text.count("\n") + 1)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            lines[tok.start[0] - 1] = tok.string
    tree = ast.parse(text, filename=name)
    docs = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) in docs:
            segment = ast.get_source_segment(text, node) or ""
            for n, line in enumerate(segment.splitlines(), node.lineno - 1):
                lines[n] = line
    return "\n".join(lines)


def _prose() -> dict[str, str]:
    """Per file, the text whose references must resolve."""
    out = {}
    for name, text in TEXTS.items():
        if name == THIS or name.startswith("tests/data/") or name.endswith(".sql"):
            continue
        if name == "CHANGELOG.md":
            out[name] = _changelog_unreleased(text)
        elif name.endswith(".py"):
            out[name] = _python_prose(text, name)
        else:
            out[name] = text
    return out


PROSE = _prose()


def _hits(pattern: re.Pattern[str], texts: dict[str, str]) -> Iterator[tuple[str, re.Match[str]]]:
    """Each match, with the file's name and the match's line: `name:line`."""
    for name, text in texts.items():
        for m in pattern.finditer(text):
            yield f"{name}:{text.count(chr(10), 0, m.start()) + 1}", m


# ---------------------------------------------------------------- how a reference resolves


@cache
def _top_level_names(module_file: Path) -> frozenset[str]:
    """Names a module defines at its top level (functions, classes, assignments, imports)."""
    tree = ast.parse(module_file.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _defines(module_file: Path, name: str) -> bool:
    folder = module_file.parent
    return (
        name in _top_level_names(module_file)
        or (module_file.name == "__init__.py" and _module_file_in(folder, name))
        or name.startswith("__")  # __version__, __file__: every module has some
    )


def _module_file_in(folder: Path, name: str) -> bool:
    return (folder / name / "__init__.py").is_file() or (folder / f"{name}.py").is_file()


def path_problem(path: str, attr: str | None) -> str | None:
    """Why a repository path does not resolve (None when it does)."""
    if "*" in path:
        return None if any(ROOT.glob(path.rstrip("/"))) else "matches no file"
    target = ROOT / path
    if not target.exists():
        return "no such file or folder"
    if attr and target.suffix == ".py" and not _defines(target, attr):
        return f"{target.name} defines no {attr!r}"
    return None


def dotted_problem(dotted: str, attr: str | None, code_strings: frozenset[str]) -> str | None:
    """Why a dotted module name does not resolve (None when it does, or when it is no module
    name at all: a string the code uses, a file name)."""
    parts = dotted.split(".")
    if dotted in code_strings or parts[-1] in NOT_MODULES:
        return None
    for i in range(len(parts), 0, -1):
        module_file = _module_file(".".join(parts[:i]))
        if module_file is None:
            continue
        rest = parts[i:] + ([attr] if attr else [])
        if i == 1 and not (rest and rest[0].startswith("__")):
            return f"no module {'.'.join(parts[:2])}"
        if rest and not _defines(module_file, rest[0]):
            return f"{'.'.join(parts[:i])} defines no {rest[0]!r}"
        return None
    return "no such module"


@cache
def _code_strings() -> frozenset[str]:
    """Every string constant of the packages' code: log events and logger names."""
    out: set[str] = set()
    for name, text in TEXTS.items():
        if name.endswith(".py") and name.startswith(("coordinator/", "client/")):
            for node in ast.walk(ast.parse(text, filename=name)):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    out.add(node.value)
    return frozenset(out)


@cache
def protocol_anchors() -> frozenset[str]:
    return frozenset(_anchors((ROOT / "docs/protocol.md").read_text(encoding="utf-8")))


def bad_references(texts: dict[str, str]) -> list[str]:
    """Every path, module and protocol anchor in `texts` that does not resolve."""
    bad = []
    for where, m in _hits(PATH_RE, texts):
        if why := path_problem(m.group(1), m.group(2)):
            bad.append(f"{where}: {m.group(0)!r}: {why}")
    names = {Path(n).name for n in TEXTS}
    for where, m in _hits(BARE_PY_RE, texts):
        if m.group(1) not in names:
            bad.append(f"{where}: {m.group(0)!r}: no file of that name")
    strings = _code_strings()
    for where, m in _hits(DOTTED_RE, {n: t for n, t in texts.items() if _has_modules(n)}):
        if why := dotted_problem(m.group(1), m.group(2), strings):
            bad.append(f"{where}: {m.group(0)!r}: {why}")
    for where, m in _hits(ANCHOR_RE, texts):
        if m.group(1) not in protocol_anchors():
            bad.append(f"{where}: {m.group(0)!r}: no such anchor in docs/protocol.md")
    return bad


def _has_modules(name: str) -> bool:
    """Dotted module names are looked for in Python prose and Markdown only (elsewhere a
    dotted word is a host name or a file name)."""
    return name.endswith((".py", ".md"))


# ---------------------------------------------------------------- the rules


def test_the_prose_list_is_real() -> None:
    assert "docs/protocol.md" in PROSE and "coordinator/actor/pipelined.py" in PROSE
    assert "CHANGELOG.md" in PROSE and "## [0." not in PROSE["CHANGELOG.md"]
    assert THIS not in PROSE
    service, prose = TEXTS["coordinator/service.py"], PROSE["coordinator/service.py"]
    assert "from __future__ import annotations" not in prose and "#unenforced" in prose
    assert prose.count("\n") == service.count("\n")  # the file's line numbers hold
    assert {"acquire", "driver-rules", "acceptance-drill"} <= protocol_anchors()


def test_every_path_module_and_protocol_anchor_resolves() -> None:
    bad = bad_references(PROSE)
    assert not bad, "references to nothing:\n" + "\n".join(bad)


def test_nothing_cites_the_contract_by_section_number() -> None:
    # Every line of every file (code strings too), but CHANGELOG.md's history and this file.
    texts = {
        name: _changelog_unreleased(text) if name == "CHANGELOG.md" else text
        for name, text in TEXTS.items()
        if name != THIS
    }
    bad = [f"{where}: {m.group(0)!r}" for where, m in _hits(SECTION_RE, texts)]
    assert not bad, "cite docs/protocol.md#<anchor> instead:\n" + "\n".join(bad)


# ---------------------------------------------------------------- the checker bites


def test_the_checker_catches_planted_bad_references() -> None:
    planted = {
        "a.py": "# see coordinator/store/sqlite_only.py and client/driver.py",
        "b.md": "`coordinator.store.mysql` and `client.api:no_such_function`",
        "c.md": "[protocol: leases](protocol.md#no-such-anchor)",
        "d.sh": "# the drill (docs/protocol.md#acceptance-drills)",
        "e.py": "# coordinator/http/app.py:no_such_handler; see auth_middleware.py",
    }
    bad = bad_references(planted)
    assert len(bad) == 8, "\n".join(bad)
    good = {
        "a.py": "# coordinator/actor/pipelined.py, client/driver/, coordinator/store/presence*.py",
        "b.md": "`coordinator.store.sqlite.SqliteLaneStore`, `client.cli:main`, `client.env`",
        "c.md": "[drill](protocol.md#acceptance-drill), docs/protocol.md#post-v1lanesacquire",
        "d.md": "`coordinator.started` is logged; `client.__version__`; committer.py",
    }
    assert bad_references(good) == []
    assert SECTION_RE.search(CONTRACT_WORD + " \u00a74.2")
    assert SECTION_RE.search(CONTRACT_WORD + " 4.2")
    assert not SECTION_RE.search(CONTRACT_WORD + "_ERROR_CODES")
