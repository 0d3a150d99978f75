"""docs/ARCHITECTURE.md stays a true map of the tree: every source folder is named in it, and
the import rules between the top-level packages that it states hold in the code."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
PACKAGES = ("commands", "gateway", "policies", "emulator", "simulation")

MAY_IMPORT: dict[str, frozenset[str]] = {
    "policies": frozenset(),
    "gateway": frozenset({"policies"}),
    "emulator": frozenset({"policies"}),
    "simulation": frozenset({"policies", "emulator"}),
    "commands": frozenset({"gateway", "policies", "emulator", "simulation"}),
}
"""Which of the other top-level packages each may import (the table's rules)."""

CORE_THIRD_PARTY = frozenset({"pydantic", "pydantic_core", "mypy_extensions"})
"""What the decision core may import beyond the standard library: its parameter models
(``*_params.py``) and mypyc's native-class helpers."""


def _imported(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
    return found


def _source_folders() -> list[str]:
    folders = {
        p.parent.relative_to(REPO).as_posix()
        for pkg in PACKAGES
        for p in (REPO / pkg).rglob("*.py")
    }
    return sorted(folders)


def _named(folder: str) -> bool:
    """Named by its path (``gateway/forward/``), or inside its parent's row by its own
    name in backticks (``scrape/`` among ``gateway/backends/``'s modules)."""
    name = folder.rsplit("/", 1)[-1]
    return f"{folder}/" in DOC or f"`{name}/`" in DOC


def test_every_source_folder_is_on_the_map() -> None:
    missing = [f for f in _source_folders() if not _named(f)]
    assert missing == [], f"folders docs/ARCHITECTURE.md does not name: {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_the_map_allows(package: str) -> None:
    others = set(PACKAGES) - {package}
    broken = {
        p.relative_to(REPO).as_posix(): sorted(_imported(p) & others - MAY_IMPORT[package])
        for p in (REPO / package).rglob("*.py")
    }
    assert {k: v for k, v in broken.items() if v} == {}


def test_the_decision_core_imports_the_standard_library_and_its_own_modules_only() -> None:
    allowed = set(sys.stdlib_module_names) | CORE_THIRD_PARTY | {"policies", "__future__"}
    broken = {
        p.relative_to(REPO).as_posix(): sorted(_imported(p) - allowed)
        for p in (REPO / "policies").rglob("*.py")
    }
    assert {k: v for k, v in broken.items() if v} == {}


def test_the_rules_checked_here_are_the_ones_the_map_states() -> None:
    for package, allowed in MAY_IMPORT.items():
        row = next(line for line in DOC.splitlines() if line.startswith(f"| `{package}/` |"))
        stated = row.split("imports:", 1)[1].split("|", 1)[0] if "imports:" in row else ""
        assert {w.strip(" `/;.") for w in stated.split(",") if w.strip(" `/;.")} == (
            set(allowed) or {"nothing outside itself"}
        ), (package, stated)
