"""The flags that say where a command writes its table and chart: ``--out`` and ``--no-chart``."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_output_flags(p: argparse.ArgumentParser, default: str, writes: str) -> None:
    """``--out PREFIX`` (``default`` unless given; ``writes``: the files it names) and
    ``--no-chart``."""
    p.add_argument("--out", type=Path, default=Path(default), help=f"output prefix: {writes}")
    p.add_argument("--no-chart", action="store_true")
