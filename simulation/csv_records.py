"""One CSV file of records: the writer every simulation table shares."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any


def write_records(path: Path, columns: Sequence[str], records: Iterable[Mapping[str, Any]]) -> None:
    """A header of ``columns``, then one line per record (its parent folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=columns)
        out.writeheader()
        for record in records:
            out.writerow(record)
