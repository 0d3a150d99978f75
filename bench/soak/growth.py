"""``python -m bench.soak.growth WORKDIR``: what grew in the gateway between the soak's
quiet points, from the memory probes of ``python -m bench.soak --probe [--tracemalloc N]``
(``WORKDIR/probes/probe-NNN.json``) and the samples file (``--samples``, for the requests
sent by each point).

After ``--warmup`` probes, it prints per probe the process's RSS and the allocators' and
tracemalloc's totals, then the allocation sites (grouped by ``--frames`` frames of their
traceback, innermost first) and the object types whose size or count grew most from the
first probe after the warm-up to the last, with their fitted growth per 1,000 requests and
the share of steps in which they grew (a site that keeps growing with the traffic grows at
nearly every step; a cache that fills, then stops, does not)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.soak.footprint import slope

MIB = 2**20


def load(workdir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The probes in order and the samples at rest they belong to (same order)."""
    probes = [json.loads(p.read_text()) for p in sorted((workdir / "probes").glob("probe-*.json"))]
    rest: list[dict[str, Any]] = []
    samples = workdir / "soak.jsonl"
    if samples.exists():
        rows = [json.loads(x) for x in samples.read_text().splitlines() if x.strip()]
        rest = [r for r in rows if r["kind"] == "rest"]
    return probes, rest


def by_site(probe: dict[str, Any], frames: int) -> dict[str, tuple[int, int]]:
    out: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for where, size, count in probe.get("sites", []):
        innermost = where[::-1][:frames]  # the probe writes them oldest first
        key = " < ".join(_short(w) for w in innermost)
        out[key][0] += size
        out[key][1] += count
    return {k: (v[0], v[1]) for k, v in out.items()}


def _short(where: str) -> str:
    for marker in ("/site-packages/", "/lib/python3", "/wt-soak/", "/main/"):
        if marker in where:
            return where.split(marker, 1)[1]
    return where


def growing(
    series: dict[str, list[float]], requests: Sequence[float], top: int
) -> list[tuple[str, float, float, float]]:
    """(name, growth first→last, fitted growth per 1,000 requests, share of steps up)."""
    out = []
    for name, ys in series.items():
        steps = [b - a for a, b in itertools.pairwise(ys)]
        up = sum(1 for s in steps if s > 0) / max(1, len(steps))
        out.append((name, ys[-1] - ys[0], slope(requests, ys) * 1000, up))
    out.sort(key=lambda r: r[1], reverse=True)
    return out[:top]


def report(workdir: Path, warmup: int, frames: int, top: int) -> str:
    probes, rest = load(workdir)
    probes, rest = probes[warmup:], rest[warmup : warmup + len(probes[warmup:])]
    if len(probes) < 2:
        return "fewer than two probes after the warm-up"
    requests = [float(r["requests"]) for r in rest] or [float(i) for i in range(len(probes))]
    lines = [" requests   RSS MiB  traced MiB  malloc in use/heap MiB  blocks  gc found"]
    for p, r in zip(probes, rest or [{}] * len(probes), strict=False):
        m = p.get("malloc", {})
        lines.append(
            f"{r.get('requests', 0):9d} {r.get('rss_bytes', 0) / MIB:9.1f} "
            f"{p.get('traced_bytes', 0) / MIB:11.2f} "
            f"{m.get('in_use', 0) / MIB:10.1f} / {m.get('arena', 0) / MIB:6.1f}    "
            f"{p['blocks']:8d} {p.get('gc_collected', -1):8d}"
        )
    totals = {
        "RSS (bytes)": [float(r.get("rss_bytes", 0)) for r in rest],
        "traced (bytes)": [float(p.get("traced_bytes", 0)) for p in probes],
        "malloc in use (bytes)": [float(p.get("malloc", {}).get("in_use", 0)) for p in probes],
        "pymalloc in use (bytes)": [
            float(p.get("obmalloc", {}).get("used_bytes", 0)) for p in probes
        ],
        "blocks": [float(p["blocks"]) for p in probes],
    }
    for name, ys in totals.items():
        if len(ys) == len(requests):
            lines.append(f"{name}: per 1,000 requests {slope(requests, ys) * 1000:+,.0f}")
    if "sites" in probes[0]:
        sites = [by_site(p, frames) for p in probes]
        names = set().union(*sites)
        series = {n: [float(s.get(n, (0, 0))[0]) for s in sites] for n in names}
        lines.append(f"\nsites that grew most (bytes; {frames} frame(s), innermost first):")
        for name, grew, per_k, up in growing(series, requests, top):
            lines.append(f"{grew:+10,.0f} B  {per_k:+9,.1f} B/1k req  up {up:4.0%}  {name}")
    if "types" in probes[0]:
        names = set().union(*(p["types"] for p in probes))
        types = {n: [float(p["types"].get(n, 0)) for p in probes] for n in names}
        lines.append("\nobject types whose count grew most:")
        for name, grew, per_k, up in growing(types, requests, top):
            lines.append(f"{grew:+10,.0f}    {per_k:+9,.1f} /1k req  up {up:4.0%}  {name}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak.growth", description=__doc__)
    p.add_argument("workdir", type=Path)
    p.add_argument("--warmup", type=int, default=3, help="probes left out at the start")
    p.add_argument("--frames", type=int, default=1)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args(argv)
    print(report(args.workdir, args.warmup, args.frames, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
