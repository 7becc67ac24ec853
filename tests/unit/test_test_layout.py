"""Tests are findable: each server module has a unit test module named after it.

Covered directories (COVERED): every module of coordinator/engine has
tests/unit/engine/test_<module>.py, every module of coordinator/store has
tests/unit/store/test_<module>.py. coordinator/actor is covered module by module as its
rewrite lands: add a module's name to ACTOR_MODULES_COVERED once
tests/unit/actor/test_<module>.py exists (and, when every actor module is listed, move
"actor" into COVERED and drop the list). `__init__.py` and the re-export shims being deleted
(SHIMS) need no test module of their own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"

# coordinator/<dir> -> every module there must have tests/unit/<dir>/test_<module>.py
COVERED = ("engine", "store")
# coordinator/actor: only these modules so far (the lead extends the list).
ACTOR_MODULES_COVERED: tuple[str, ...] = ()
# Re-export shims on their way out: no test module of their own (gone files are fine).
SHIMS = frozenset({"coordinator/engine/receipts.py"})


def _modules(directory: str, root: Path = ROOT) -> list[str]:
    """The module names of coordinator/<directory> (not __init__, not the shims)."""
    folder = root / "coordinator" / directory
    return sorted(
        p.stem
        for p in folder.glob("*.py")
        if p.name != "__init__.py" and p.relative_to(root).as_posix() not in SHIMS
    )


def _test_module(directory: str, module: str, root: Path = ROOT) -> Path:
    return root / "tests" / "unit" / directory / f"test_{module}.py"


def _missing(directory: str, modules: list[str], root: Path = ROOT) -> list[str]:
    """The mirrored test modules of `modules` that do not exist."""
    return [
        _test_module(directory, m, root).relative_to(root).as_posix()
        for m in modules
        if not _test_module(directory, m, root).is_file()
    ]


@pytest.mark.parametrize("directory", COVERED)
def test_every_module_of_a_covered_directory_has_its_unit_test_module(directory: str) -> None:
    modules = _modules(directory)
    assert len(modules) >= 5, modules  # the walk found the package
    missing = _missing(directory, modules)
    assert not missing, f"coordinator/{directory}: no unit test module {missing}"


@pytest.mark.parametrize("directory", COVERED)
def test_a_test_package_has_its_init(directory: str) -> None:
    assert (UNIT / directory / "__init__.py").is_file()


def test_every_listed_actor_module_exists_and_has_its_unit_test_module() -> None:
    actor = _modules("actor")
    assert actor, "coordinator/actor has no modules: move it out of the actor list"
    unknown = [m for m in ACTOR_MODULES_COVERED if m not in actor]
    assert not unknown, f"ACTOR_MODULES_COVERED names modules coordinator/actor lacks: {unknown}"
    missing = _missing("actor", list(ACTOR_MODULES_COVERED))
    assert not missing, f"coordinator/actor: no unit test module {missing}"


def test_the_check_reports_a_module_without_a_test_module(tmp_path: Path) -> None:
    """On a small tree: a module with no test module is reported, __init__ and shims are not."""
    src = tmp_path / "coordinator" / "engine"
    tests = tmp_path / "tests" / "unit" / "engine"
    src.mkdir(parents=True)
    tests.mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "receipts.py"):
        (src / name).write_text("")
    (tests / "test_a.py").write_text("")
    modules = _modules("engine", tmp_path)
    assert modules == ["a", "b"]
    assert _missing("engine", modules, tmp_path) == ["tests/unit/engine/test_b.py"]
