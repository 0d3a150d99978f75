"""vLLM's metric families as data, derived from a real ``/metrics`` dump.

``vllm_metrics_0.32.json`` (beside this file) was written by::

    python -m emulator.metric_table tests/fixtures/vllm-0.32-metrics-under-load.txt

Each entry: ``name`` (as prometheus_client declares it: counters without ``_total``), ``type``,
``help``, ``labels`` (sorted, as vLLM emits them), ``label_values`` (the children vLLM creates
up front, for labels other than ``engine``/``model_name``), ``buckets`` (histograms, without
``+Inf``) and ``constant_labels`` (only ``cache_config_info``: the labels of its one sample).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, TypedDict

from prometheus_client.parser import text_string_to_metric_families

TABLE_PATH = Path(__file__).parent / "vllm_metrics_0.32.json"
PREFIX = "vllm:"
IDENTITY_LABELS = ("engine", "model_name")


class FamilySpec(TypedDict):
    name: str
    type: str
    help: str
    labels: list[str]
    label_values: dict[str, list[str]]
    buckets: list[float]
    constant_labels: dict[str, str]


def derive_table(exposition: str) -> list[FamilySpec]:
    """The ``vllm:`` families of an exposition, in order; ``*_created`` siblings are implied."""
    table: list[FamilySpec] = []
    for family in text_string_to_metric_families(exposition):
        if not family.name.startswith(PREFIX) or family.name.endswith("_created"):
            continue
        table.append(_spec(family))
    return table


def _spec(family: Any) -> FamilySpec:
    labels: set[str] = set()
    values: dict[str, list[str]] = {}
    buckets: list[float] = []
    for sample in family.samples:
        for key, value in sample.labels.items():
            if key == "le":
                bound = float(value)
                if math.isfinite(bound) and bound not in buckets:
                    buckets.append(bound)
                continue
            labels.add(key)
            if key not in IDENTITY_LABELS:
                seen = values.setdefault(key, [])
                if value not in seen:
                    seen.append(value)
    constant: dict[str, str] = {}
    if family.type == "gauge" and family.name.endswith("_info"):
        constant = {k: v for k, v in family.samples[0].labels.items() if k not in IDENTITY_LABELS}
        values = {}
    return FamilySpec(
        name=family.name,
        type=family.type,
        help=family.documentation,
        labels=sorted(labels),
        label_values=values,
        buckets=buckets,
        constant_labels=constant,
    )


def load_table(path: Path = TABLE_PATH) -> list[FamilySpec]:
    with path.open(encoding="utf-8") as f:
        table: list[FamilySpec] = json.load(f)
    return table


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m emulator.metric_table DUMP.txt", file=sys.stderr)
        return 2
    table = derive_table(Path(args[0]).read_text(encoding="utf-8"))
    TABLE_PATH.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(table)} families -> {TABLE_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
