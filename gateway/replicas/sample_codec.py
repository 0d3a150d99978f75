"""A parsed scrape (``MetricsSample``) as JSON, to hand from the replica that scraped a
backend to the others. Histogram bounds end with +Inf: written and read as ``Infinity``."""

from __future__ import annotations

import json
from typing import Any

from gateway.backends.scrape.sample import Histogram, MetricsSample


def encode(sample: MetricsSample) -> str:
    hists = {
        name: [list(h.bounds), list(h.cumulative), h.sum, h.count]
        for name, h in sample.histograms.items()
    }
    return json.dumps(
        {
            "running": sample.running,
            "waiting": sample.waiting,
            "waiting_by_reason": dict(sample.waiting_by_reason),
            "kv_cache_usage": sample.kv_cache_usage,
            "kv_cache_tokens": sample.kv_cache_tokens,
            "kv_block_size": sample.kv_block_size,
            "counters": dict(sample.counters),
            "histograms": hists,
        },
        separators=(",", ":"),
    )


def decode(text: str | bytes) -> MetricsSample:
    raw: dict[str, Any] = json.loads(text)
    hists = {
        name: Histogram(tuple(b), tuple(c), float(s), float(n))
        for name, (b, c, s, n) in raw["histograms"].items()
    }
    return MetricsSample(
        running=raw["running"],
        waiting=raw["waiting"],
        waiting_by_reason=raw["waiting_by_reason"],
        kv_cache_usage=raw["kv_cache_usage"],
        kv_cache_tokens=raw["kv_cache_tokens"],
        kv_block_size=raw.get("kv_block_size"),
        counters=raw["counters"],
        histograms=hists,
    )
