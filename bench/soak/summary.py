"""``python -m bench.soak.summary SAMPLES.jsonl``: the soak's curve from the samples file
``python -m bench.soak --samples`` writes (readable while the soak runs).

Prints the gateway's footprint at rest (RSS, open fds, asyncio tasks) per ``--bucket-min``
minutes (the last quiet point of each bucket, and the load's peak RSS in it), then the fitted
slope per hour over the last ``--window-min`` minutes of quiet points and over the second half
of the run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.soak.footprint import slope

MIB = 2**20


def read(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line being written as we read
                continue
    return rows


def curve(rows: Sequence[dict[str, Any]], bucket_s: float) -> list[str]:
    rest = [r for r in rows if r["kind"] == "rest"]
    if not rest:
        return ["no quiet point yet"]
    out = [" min   RSS MiB   fds  tasks  requests reloads faults problems  (load peak RSS)"]
    last_bucket = int(rest[-1]["t_s"] // bucket_s)
    for b in range(last_bucket + 1):
        in_b = [r for r in rest if int(r["t_s"] // bucket_s) == b]
        if not in_b:
            continue
        r = in_b[-1]
        load = [
            x["rss_bytes"] for x in rows if x["kind"] == "load" and int(x["t_s"] // bucket_s) == b
        ]
        peak = f"({max(load) / MIB:.1f})" if load else ""
        out.append(
            f"{r['t_s'] / 60:5.1f} {r['rss_bytes'] / MIB:8.1f} {r['fds']:5d} "
            f"{r['tasks']:6d} {r['requests']:9d} {r['reloads']:7d} {r['faults']:6d} "
            f"{r['problems']:8d}  {peak}"
        )
    return out


def fitted(rows: Sequence[dict[str, Any]], label: str) -> str:
    if len(rows) < 3:
        return f"{label}: too few quiet points ({len(rows)})"
    ts = [r["t_s"] for r in rows]
    per_h = {
        "RSS": slope(ts, [r["rss_bytes"] / MIB for r in rows]) * 3600,
        "fds": slope(ts, [float(r["fds"]) for r in rows]) * 3600,
        "tasks": slope(ts, [float(r["tasks"]) for r in rows]) * 3600,
    }
    span = (ts[-1] - ts[0]) / 60
    return (
        f"{label} ({span:.0f} min, {len(rows)} quiet points): RSS {per_h['RSS']:+.2f} MiB/h, "
        f"fds {per_h['fds']:+.2f}/h, tasks {per_h['tasks']:+.2f}/h"
    )


def summary(rows: Sequence[dict[str, Any]], bucket_s: float, window_s: float) -> str:
    rest = [r for r in rows if r["kind"] == "rest"]
    lines = curve(rows, bucket_s)
    if rest:
        end = rest[-1]["t_s"]
        lines.append(
            fitted([r for r in rest if r["t_s"] >= end - window_s], f"last {window_s / 60:.0f} min")
        )
        lines.append(fitted(rest[len(rest) // 2 :], "second half"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak.summary", description=__doc__)
    p.add_argument("samples", type=Path)
    p.add_argument("--bucket-min", type=float, default=10.0)
    p.add_argument("--window-min", type=float, default=60.0)
    args = p.parse_args(argv)
    print(summary(read(args.samples), args.bucket_min * 60, args.window_min * 60))
    return 0


if __name__ == "__main__":
    sys.exit(main())
