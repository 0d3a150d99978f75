"""Numbers of a tree's layout, this checkout against another: the files and lines of each
front, the largest modules and functions, upward imports and import cycles.

    python scripts/layout.py [--baseline DIR]

Read from the source as text (``ast``), nothing imported, over the product's packages
(``gateway/``, ``policies/``, ``commands/``, ``emulator/``, ``simulation/``):

- a front: the modules of its folder (``gateway/front``, ``gateway/epp``,
  ``gateway/async_jobs``), with their lines, and those of the pipeline every front calls
  (``gateway/request``);
- a module's or a function's size: its lines, blank lines and docstrings included;
- an upward import: one against the order of docs/ARCHITECTURE.md's packages (``policies/``
  imports nothing outside itself; ``emulator/`` only ``policies/``; ``gateway/`` only
  ``policies/``; ``simulation/`` only ``policies/`` and ``emulator/``), or a room of
  ``gateway/`` importing its composition root (``gateway/app.py``);
- the context's reach: the modules that import ``gateway/context.py`` (the service bag);
- a cycle: a set of modules that import each other round, with the module-level imports
  that run, and again with those under ``if TYPE_CHECKING:`` too (what mypy follows).
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "policies", "commands", "emulator", "simulation")
FRONTS = {
    "HTTP": "gateway/front",
    "Endpoint Picker": "gateway/epp",
    "async jobs": "gateway/async_jobs",
    "the pipeline they call": "gateway/request",
}


@dataclass(frozen=True)
class Layout:
    front_files: dict[str, tuple[int, int]]
    """Front name -> (modules, lines)."""
    modules: list[tuple[int, str]]
    functions: list[tuple[int, str]]
    upward: list[str]
    context_importers: int
    cycles: list[list[str]]
    typing_cycles: list[list[str]]


def _modules(tree: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((tree / package).rglob("*.py")):
            rel = path.relative_to(tree).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            found[".".join(parts)] = path
    return found


MAY_IMPORT = {
    "policies": {"policies"},
    "emulator": {"emulator", "policies"},
    "gateway": {"gateway", "policies"},
    "simulation": {"simulation", "policies", "emulator"},
    "commands": set(PACKAGES),
}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    name: str, path: Path, body: ast.Module, known: dict[str, Path], typing: bool
) -> Iterator[str]:
    """The tree's modules that ``name`` imports at module level (when it is imported; with
    ``typing``, those imported for the type checker only too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes: list[ast.stmt] = list(body.body)
    while nodes:
        node = nodes.pop()
        if isinstance(node, ast.If) and (typing or not _type_checking(node)):
            nodes += node.body + node.orelse
        elif isinstance(node, ast.Try):
            nodes += node.body + node.orelse + node.finalbody
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            if base in known:
                yield base
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    yield f"{base}.{alias.name}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layout(tree: Path) -> Layout:
    known = _modules(tree)
    graph: dict[str, set[str]] = {}
    typing_graph: dict[str, set[str]] = {}
    modules: list[tuple[int, str]] = []
    functions: list[tuple[int, str]] = []
    upward: list[str] = []
    for name, path in known.items():
        text = path.read_text()
        body = ast.parse(text)
        rel = str(path.relative_to(tree))
        modules.append((len(text.splitlines()), rel))
        for node in ast.walk(body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
                lines = node.end_lineno - node.lineno + 1
                functions.append((lines, f"{rel}:{node.name}"))
        targets = set(_imports(name, path, body, known, typing=False)) - {name}
        graph[name] = targets
        typing_graph[name] = set(_imports(name, path, body, known, typing=True)) - {name}
        top = name.split(".")[0]
        for target in sorted(typing_graph[name]):
            outside = target.split(".")[0] not in MAY_IMPORT[top]
            root = target == "gateway.app" and name.count(".") >= 2
            if outside or root:
                upward.append(f"{rel} -> {known[target].relative_to(tree)}")
    context_importers = sum("gateway.context" in t for t in typing_graph.values())
    fronts = {}
    for front, folder in FRONTS.items():
        files = [p for p in (tree / folder).glob("*.py") if p.name != "__init__.py"]
        fronts[front] = (len(files), sum(len(p.read_text().splitlines()) for p in files))
    modules.sort(reverse=True)
    functions.sort(reverse=True)
    cycles, typing_cycles = _cycles(graph), _cycles(typing_graph)
    return Layout(fronts, modules, functions, upward, context_importers, cycles, typing_cycles)


def _describe(name: str, got: Layout, top: int) -> list[str]:
    lines = [f"## {name}", ""]
    for front, (files, count) in got.front_files.items():
        lines.append(f"- front {front}: {files} modules, {count} lines")
    lines.append("- largest modules: " + ", ".join(f"{p} {n}" for n, p in got.modules[:top]))
    lines.append("- largest functions: " + ", ".join(f"{p} {n}" for n, p in got.functions[:top]))
    lines.append(f"- upward imports: {len(got.upward)}")
    lines += [f"  - {u}" for u in got.upward]
    lines.append(f"- modules importing gateway/context.py: {got.context_importers}")
    for kind, cycles in (("run", got.cycles), ("typing included", got.typing_cycles)):
        sizes = ", ".join(str(len(c)) for c in cycles) or "none"
        lines.append(f"- import cycles ({kind}): {len(cycles)} (modules in each: {sizes})")
        lines += [f"  - {', '.join(c)}" for c in cycles]
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", type=Path)
    p.add_argument("--top", type=int, default=5)
    args = p.parse_args(argv)
    trees = [("this checkout", REPO)]
    if args.baseline is not None:
        trees.append((f"baseline ({args.baseline})", args.baseline.resolve()))
    for name, tree in trees:
        print("\n".join(_describe(name, layout(tree), args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
