"""PromQL in the deploy artifacts: parse it for real and list the metric names it selects.

Grafana's variables are not PromQL; they are replaced by values of the same syntactic kind
before parsing (``$__rate_interval`` by a duration; label values are inside strings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import promql_parser

_GRAFANA_DURATIONS = re.compile(r"\$__(rate_interval|interval|range)\b")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.*),\s*\w+\s*\)\s*$")


class UnnamedSelector(ValueError):
    """A selector without a metric name (``{__name__=~...}``) cannot be checked."""


def as_promql(expr: str) -> str:
    """The expression with Grafana's duration variables replaced by a real duration."""
    return _GRAFANA_DURATIONS.sub("1m", expr)


def metric_names(expr: str) -> set[str]:
    """Every metric name the expression selects. Raises ``ValueError`` when it does not
    parse (unknown function, bad syntax) and ``UnnamedSelector`` for a nameless one."""
    names: set[str] = set()
    unnamed: list[str] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            else:
                unnamed.append(str(node))
        return True

    promql_parser.walk(promql_parser.parse(as_promql(expr)), visit)
    if unnamed:
        raise UnnamedSelector(f"{expr!r} selects without a metric name: {unnamed}")
    return names


def template_selector(query: str) -> str:
    """The selector inside a Grafana ``label_values(selector, label)`` variable query."""
    found = _LABEL_VALUES.match(query)
    if found is None:
        raise ValueError(f"not a label_values(selector, label) query: {query!r}")
    return found.group("selector")


def unknown_names(exprs: Iterable[str], known: set[str]) -> dict[str, set[str]]:
    """Per expression, the metric names it selects that are not in ``known``."""
    out = {}
    for expr in exprs:
        missing = metric_names(expr) - known
        if missing:
            out[expr] = missing
    return out
