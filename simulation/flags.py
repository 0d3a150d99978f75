"""Command-line flags whose defaults are those of the dataclass fields they set, so that a
command's default and its library's default are one value."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Any


def field_defaults(cls: Any) -> dict[str, Any]:
    """The default of each field of dataclass ``cls`` that has one, by field name."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def number_flag(
    p: argparse.ArgumentParser, flag: str, default: float, help: str | None = None
) -> None:
    """``flag`` takes a number of ``default``'s type (int or float); ``default`` when absent."""
    p.add_argument(flag, type=type(default), default=default, help=help)


def choice_flag(
    p: argparse.ArgumentParser, flag: str, choices: tuple[str, ...], help: str | None = None
) -> None:
    """``flag`` takes one of ``choices``; the first when absent."""
    p.add_argument(flag, choices=choices, default=choices[0], help=help)
