"""The mutants of one module: small AST edits, each named by a key that stays the same while
the code around it changes (enclosing function, operator, original text, occurrence).

Operators: comparisons moved across their boundary (``<`` and ``<=``, ``>`` and ``>=``),
turned around (``<`` and ``>``, ``<=`` and ``>=``: a min written as a comparison becomes a
max) or negated (``==`` and ``!=``, ``is``, ``in``); ``+`` and ``-``, ``*`` and ``/`` swapped
(also in ``+=``); numeric constants plus and minus one; ``if``/``while``/ternary conditions
negated; ``return x`` made ``return None``; ``and`` and ``or`` swapped; each operand of an
``and``/``or`` dropped (a guard left out); a comprehension's ``if`` filter dropped; ``max``
and ``min`` swapped; a call made as a statement removed (``d.pop(k)``, ``heappush(...)``);
a store into an item removed (``d[k] = v``); a ``return`` that ends an ``if`` body removed
(the early exit falls through)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CodeType
from typing import Any

_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_TURN: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.Gt,
    ast.LtE: ast.GtE,
    ast.Gt: ast.Lt,
    ast.GtE: ast.LtE,
}
_MIN_MAX = {"min": "max", "max": "min"}
_SINK = "_mutant_sink"  # a removed store into an item stores here: the value is still evaluated
_ARITH: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.And: "and",
    ast.Or: "or",
}
_MAX_TEXT = 70


@dataclass(frozen=True)
class Mutant:
    module: str  # path relative to the repository, as in mutation.toml
    key: str  # stable: "scope|operator|original text|occurrence"
    line: int
    change: str  # "original -> replacement", for people


@dataclass
class _Site:
    scope: str
    operator: str
    original: str
    line: int
    apply: Callable[[], None]


def mutants(module: str, source: str) -> list[Mutant]:
    return [
        Mutant(module, key, site.line, f"{site.operator}: {site.original}")
        for key, site in _keyed(source)
    ]


def mutated_code(module: str, source: str, key: str) -> CodeType:
    """``source`` compiled with the one mutant ``key`` applied (KeyError if it has none)."""
    tree = ast.parse(source, module)
    for found, site in _keyed(source, tree):
        if found == key:
            site.apply()
            return compile(ast.fix_missing_locations(tree), module, "exec")
    raise KeyError(f"{module} has no mutant {key!r}")


def _keyed(source: str, tree: ast.Module | None = None) -> Iterator[tuple[str, _Site]]:
    collector = _Collector(source)
    collector.visit(tree or ast.parse(source))
    seen: dict[str, int] = {}
    for site in collector.sites:
        base = f"{site.scope}|{site.operator}|{site.original}"
        n = seen[base] = seen.get(base, -1) + 1
        yield f"{base}|{n}", site


class _Collector(ast.NodeVisitor):
    """The mutation sites in source order; annotations and ``TYPE_CHECKING`` blocks skipped."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.scope: list[str] = []
        self.sites: list[_Site] = []

    def _add(self, node: ast.AST, operator: str, apply: Callable[[], None]) -> None:
        text = " ".join((ast.get_source_segment(self.source, node) or ast.unparse(node)).split())
        text = text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."
        scope = ".".join(self.scope) or "<module>"
        self.sites.append(_Site(scope, operator, text, getattr(node, "lineno", 0), apply))

    def _scoped(self, name: str, body: list[ast.stmt]) -> None:
        self.scope.append(name)
        for stmt in body:
            self.visit(stmt)
        self.scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._scoped(node.name, node.body)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        self._scoped(node.name, node.body)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)

    def visit_If(self, node: ast.If) -> None:
        if ast.unparse(node.test) in ("TYPE_CHECKING", "__name__ == '__main__'"):
            return
        self._negate(node, "if")
        last = node.body[-1]
        if isinstance(last, ast.Return):
            self._add(last, "remove return", _set_item(node.body, len(node.body) - 1, ast.Pass()))
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._negate(node, "while")
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._negate(node, "ternary")
        self.generic_visit(node)

    def _negate(self, node: ast.If | ast.While | ast.IfExp, kind: str) -> None:
        test = node.test

        def apply() -> None:
            node.test = ast.copy_location(ast.UnaryOp(ast.Not(), test), test)

        self._add(test, f"negate {kind}", apply)

    def visit_Compare(self, node: ast.Compare) -> None:
        for i, op in enumerate(node.ops):
            new = _COMPARE.get(type(op))
            if new is not None:
                self._add(
                    node, f"{_SYMBOL[type(op)]} -> {_SYMBOL[new]}", _set_item(node.ops, i, new())
                )
            turned = _TURN.get(type(op))
            if turned is not None:
                self._add(
                    node,
                    f"{_SYMBOL[type(op)]} -> {_SYMBOL[turned]}",
                    _set_item(node.ops, i, turned()),
                )
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in _MIN_MAX:
            swapped = ast.Name(_MIN_MAX[func.id], ast.Load())
            self._add(node, f"{func.id} -> {_MIN_MAX[func.id]}", _set_attr(node, "func", swapped))
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call):
            self._add(node, "remove call", _set_attr(node, "value", ast.Constant(None)))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        if all(isinstance(t, ast.Subscript) for t in node.targets):
            sink = [ast.Name(_SINK, ast.Store())]
            self._add(node, "remove store", _set_attr(node, "targets", sink))
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for i, test in enumerate(node.ifs):
            self._add(test, "drop filter", _set_expr(node.ifs, i, ast.Constant(True)))
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        self._arith(node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._arith(node)
        self.generic_visit(node)

    def _arith(self, node: ast.BinOp | ast.AugAssign) -> None:
        new = _ARITH.get(type(node.op))
        if new is not None:
            self._add(
                node, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", _set_attr(node, "op", new())
            )

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        self._add(node, f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", _set_attr(node, "op", new()))
        neutral = isinstance(node.op, ast.And)  # x and True is x; x or False is x
        for i, operand in enumerate(node.values):
            self._add(operand, "drop operand", _set_expr(node.values, i, ast.Constant(neutral)))
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        value = node.value
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            self._add(node, "return None", _set_attr(node, "value", ast.Constant(None)))
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int | float):
            return
        for delta, name in ((1, "+1"), (-1, "-1")):
            self._add(node, f"const {name}", _set_attr(node, "value", value + delta))


def _set_attr(node: ast.AST, name: str, value: object) -> Callable[[], None]:
    return lambda: setattr(node, name, value)


def _set_item(items: list[ast.cmpop] | list[ast.stmt], i: int, value: Any) -> Callable[[], None]:
    return lambda: items.__setitem__(i, value)


def _set_expr(items: list[ast.expr], i: int, value: ast.expr) -> Callable[[], None]:
    return lambda: items.__setitem__(i, ast.copy_location(value, items[i]))
