"""The matrix's hashed cells (``multi-turn`` by default) with each policy in three columns:
what charging and placing by the prefix cache changes.

- ``blind``: the policy with ``cache: {estimate: hit_rate}``, the fair share and every
  quota counting all prompt tokens (``prompt_tokens``); least-loaded placement;
- ``cost``: ``cache: {estimate: prefix_model, fairness_counts: computed_tokens}`` and
  every quota counting ``computed_tokens``;
- ``locality``: ``cost`` with ``locality_weight`` (default 4, the prefix-cache bench's).

Each column is a ratio to the same policy's ``blind`` column (goodput, worst tenant's
TTFT p99). The default policy's ``blind`` column is the default itself. With
``--fairness`` the columns are each policy as shipped and the same with only
``fairness_counts: computed_tokens``. Example::

    python -m simulation.matrix.cache_columns --profiles rx9070xt --loads 1,2 --out /tmp/cc
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulation.matrix.cells import Cell, full_matrix
from simulation.matrix.evaluate import DEFAULT, Policies, evaluate, shipped_policies
from simulation.matrix.guard import CellRow

COLUMNS = ("blind", "cost", "locality")
FAIRNESS_COLUMNS = ("shipped", "fairness")
"""``--fairness``: each policy as shipped against the same with only
``cache.fairness_counts: computed_tokens`` (what a preset's ``fairness_counts`` line
changes)."""
LOCALITY_WEIGHT = 4.0


def variant(policy: dict[str, Any], column: str, weight: float = LOCALITY_WEIGHT) -> dict[str, Any]:
    """``policy`` (a ``policy:`` mapping) as column ``column`` charges and places."""
    out = copy.deepcopy(policy)
    if column in FAIRNESS_COLUMNS:
        if column == "fairness":
            out.setdefault("cache", {})["fairness_counts"] = "computed_tokens"
        return out
    aware = column != "blind"
    counts = "computed_tokens" if aware else "prompt_tokens"
    cache = out.setdefault("cache", {})
    cache["estimate"] = "prefix_model" if aware else "hit_rate"
    cache["fairness_counts"] = counts
    cache["locality_weight"] = weight if column == "locality" else 0.0
    for gate in out.get("gates", []):
        if gate.get("type") == "tenant_quota":
            gate.setdefault("parameters", {})["counts"] = counts
    return out


def label(name: str, column: str) -> str:
    """The row label: the default's reference column is the matrix's ``default``."""
    reference = column in (COLUMNS[0], FAIRNESS_COLUMNS[0])
    return DEFAULT if name == DEFAULT and reference else f"{name}:{column}"


def columns(
    policies: Policies, weight: float = LOCALITY_WEIGHT, names: Sequence[str] = COLUMNS
) -> Policies:
    return [(label(n, c), variant(p, c, weight)) for n, p in policies for c in names]


def _worst_ttft(row: CellRow) -> float:
    return max(t.ttft_p99_s for t in row.tenants.values())


def table(
    rows: Sequence[CellRow], names: Sequence[str], cols: Sequence[str] = COLUMNS
) -> list[str]:
    """One markdown line per (cell, policy): goodput and worst TTFT p99 per column, the
    others as ratios to the first."""
    by = {(r.cell, r.policy): r for r in rows}
    ref, others = cols[0], cols[1:]
    head = [f"{ref} tok/s", *others, f"{ref} TTFT p99 s", *others]
    lines = ["| cell | policy | " + " | ".join(head) + " |", "|---" * (len(head) + 2) + "|"]
    for cell in dict.fromkeys(r.cell for r in rows):
        for name in names:
            first, *rest = (by[(cell, label(name, c))] for c in cols)
            g, t = first.goodput_tps, _worst_ttft(first)
            goodput = [f"{r.goodput_tps / g:.2f}x" for r in rest]
            ttft = [f"{_worst_ttft(r) / t:.2f}x" for r in rest]
            values = [f"{g:.0f}", *goodput, f"{t:.2f}", *ttft]
            lines.append(f"| {cell} | {name} | " + " | ".join(values) + " |")
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default="multi-turn")
    p.add_argument("--profiles", default=None, help="comma-separated (default: all)")
    p.add_argument("--loads", default=None, help="comma-separated (default: all)")
    p.add_argument("--backends", default=None, help="comma-separated (default: 1,2)")
    p.add_argument("--policies", default=None, help="comma-separated (default: all shipped)")
    p.add_argument("--weight", type=float, default=LOCALITY_WEIGHT)
    p.add_argument(
        "--fairness",
        action="store_true",
        help="each policy as shipped against the same with fairness_counts: computed_tokens",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=None, help="write the table to OUT.md")
    return p


def _pick(text: str | None) -> set[str] | None:
    return None if text is None else set(text.split(","))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    w, p, loads, backends = (
        _pick(args.workloads),
        _pick(args.profiles),
        _pick(args.loads),
        _pick(args.backends),
    )
    cells: list[Cell] = [
        c
        for c in full_matrix()
        if (w is None or c.workload in w)
        and (p is None or c.profile in p)
        and (loads is None or f"{c.load:g}" in loads)
        and (backends is None or str(c.backends) in backends)
    ]
    chosen = _pick(args.policies)
    base = [(n, q) for n, q in shipped_policies() if chosen is None or n in chosen]
    if DEFAULT not in {n for n, _ in base}:
        base.insert(0, next(x for x in shipped_policies() if x[0] == DEFAULT))
    cols = FAIRNESS_COLUMNS if args.fairness else COLUMNS
    policies = columns(base, args.weight, cols)
    rows = evaluate(cells, policies, workers=args.workers, progress=print)
    lines = table(rows, [n for n, _ in base], cols)
    print("\n".join(lines))
    if args.out is not None:
        args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
