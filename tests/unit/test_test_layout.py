"""Tests are findable: each server module has a unit test module named after it.

Covered directories (COVERED): every module of coordinator/actor, coordinator/engine and
coordinator/store has tests/unit/<dir>/test_<module>.py. `__init__.py` needs no test module
of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "tests" / "unit"

# coordinator/<dir> -> every module there must have tests/unit/<dir>/test_<module>.py
COVERED = ("actor", "engine", "store")


def _modules(directory: str, root: Path = ROOT) -> list[str]:
    """The module names of coordinator/<directory> (not __init__)."""
    folder = root / "coordinator" / directory
    return sorted(p.stem for p in folder.glob("*.py") if p.name != "__init__.py")


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


def test_the_check_reports_a_module_without_a_test_module(tmp_path: Path) -> None:
    """On a small tree: a module with no test module is reported, __init__ is not."""
    src = tmp_path / "coordinator" / "engine"
    tests = tmp_path / "tests" / "unit" / "engine"
    src.mkdir(parents=True)
    tests.mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py"):
        (src / name).write_text("")
    (tests / "test_a.py").write_text("")
    modules = _modules("engine", tmp_path)
    assert modules == ["a", "b"]
    assert _missing("engine", modules, tmp_path) == ["tests/unit/engine/test_b.py"]
