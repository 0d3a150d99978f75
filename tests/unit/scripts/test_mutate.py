"""The mutation tool's parts that need no test run: which mutants a source has, that a key
names the same mutant after the code around it moves, that a mutant changes exactly what its
key says, and that mutation.toml and the equivalents file point at things that exist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.mutation.config import load
from scripts.mutation.operators import mutants, mutated_code

ROOT = Path(__file__).resolve().parents[3]
SOURCE = """
LIMIT = 10


def over(x: int, y: int) -> bool:
    if x + y >= LIMIT and x > 0:
        return True
    return x * 2 == y
"""


def run(key: str, x: int, y: int) -> Any:
    scope: dict[str, Any] = {}
    exec(mutated_code("m.py", SOURCE, key), scope)
    return scope["over"](x, y)


def test_every_operator_yields_its_mutants() -> None:
    changes = {m.key.split("|")[1] for m in mutants("m.py", SOURCE)}
    assert changes == {
        "const +1",
        "const -1",
        "negate if",
        "and -> or",
        ">= -> >",
        "> -> >=",
        "+ -> -",
        "return None",
        "* -> /",
        "== -> !=",
        ">= -> <=",
        "> -> <",
        "drop operand",
        "remove return",
    }
    keys = [m.key for m in mutants("m.py", SOURCE)]
    assert len(keys) == len(set(keys))


def test_a_mutant_changes_exactly_what_its_key_names() -> None:
    assert run("over|>= -> >|x + y >= LIMIT|0", 4, 6) is False
    assert run("over|+ -> -|x + y|0", 9, 1) is False
    assert run("<module>|const +1|10|0", 5, 5) is False
    assert run("over|return None|return x * 2 == y|0", 1, 2) is None
    assert run("over|and -> or|x + y >= LIMIT and x > 0|0", 0, 20) is True


BOOKS = """
def book(d: dict[str, int], log: list[int], k: str, n: int) -> int:
    d[k] = max(d.get(k, 0), n)
    log.append(n)
    if n < 0:
        return -1
    return sum(v for v in d.values() if v > 1)
"""


def run_books(key: str, n: int) -> tuple[int, dict[str, int], list[int]]:
    scope: dict[str, Any] = {}
    exec(mutated_code("m.py", BOOKS, key), scope)
    d, log = {"a": 5}, []
    return scope["book"](d, log, "a", n), d, log


def test_the_operators_a_second_tool_found_missing_change_what_they_say() -> None:
    """Turned comparisons, min/max, a dropped guard or filter, a removed call, store or
    early return: each mutant of ``BOOKS`` against the original on one input."""
    assert run_books("book|< -> >|n < 0|0", 7) == (-1, {"a": 7}, [7])
    assert run_books("book|max -> min|max(d.get(k, 0), n)|0", 7) == (5, {"a": 5}, [7])
    assert run_books("book|drop filter|v > 1|0", 1) == (5, {"a": 5}, [1])
    assert run_books("book|remove call|log.append(n)|0", 7) == (7, {"a": 7}, [])
    assert run_books("book|remove store|d[k] = max(d.get(k, 0), n)|0", 7) == (5, {"a": 5}, [7])
    assert run_books("book|remove return|return -1|0", -3) == (5, {"a": 5}, [-3])
    assert run_books("book|const +1|0|0", 7) == (7, {"a": 7}, [7])  # the old keys stay
    assert run("over|drop operand|x > 0|0", 0, 20) is True
    assert run("over|drop operand|x + y >= LIMIT|0", 1, 2) is True
    assert run("over|> -> <|x > 0|0", 5, 5) is False


def test_keys_survive_code_moving_around_them() -> None:
    moved = "import os\n\n\n" + SOURCE.replace("LIMIT = 10", "LIMIT = 10\nOTHER = 3")
    before = {m.key for m in mutants("m.py", SOURCE)}
    after = {m.key for m in mutants("m.py", moved)}
    assert before <= after
    assert {m.line for m in mutants("m.py", SOURCE)} != {m.line for m in mutants("m.py", moved)}


def test_annotations_and_type_checking_blocks_are_not_mutated() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    X = 1\nY: 'int | None' = None\n"
    )
    assert mutants("m.py", source) == []


def test_the_config_names_existing_modules_and_tests_and_every_equivalent_a_reason() -> None:
    config = load(ROOT)
    for module, tests in config.modules.items():
        assert (ROOT / module).is_file(), module
        assert tests and all((ROOT / t).exists() for t in tests), module
    assert set(config.slice_modules) <= set(config.modules)
    keys: dict[str, set[str]] = {}  # each module's mutants, made once
    for (module, key), reason in config.equivalents.items():
        assert module in config.modules and reason, key
        if module not in keys:
            keys[module] = {m.key for m in mutants(module, (ROOT / module).read_text())}
        assert key in keys[module], key
