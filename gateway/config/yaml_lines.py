"""Load YAML into plain Python values while remembering the line of every key and item."""

from __future__ import annotations

from typing import Any

import yaml

Loc = tuple[str | int, ...]


class LineIndex:
    """Maps a path of keys/indexes to its 1-based line; unknown paths fall back to a parent."""

    def __init__(self, lines: dict[Loc, int]) -> None:
        self._lines = lines

    def line_of(self, loc: Loc) -> int:
        for end in range(len(loc), -1, -1):
            line = self._lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return 0


class _LineLoader(yaml.SafeLoader):
    """A safe loader; duplicate keys are an error rather than a silent overwrite."""


def load_yaml_with_lines(text: str) -> tuple[Any, LineIndex]:
    node = yaml.compose(text, Loader=_LineLoader)
    if node is None:
        return None, LineIndex({(): 1})
    lines: dict[Loc, int] = {}
    _index(node, (), lines)
    data = yaml.load(text, Loader=_LineLoader)  # SafeLoader subclass
    return data, LineIndex(lines)


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            if key in seen:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark
                )
            seen.add(key)
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _index(value_node, (*loc, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, (*loc, i), lines)
