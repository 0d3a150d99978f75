"""Summaries of one variant's run: the victim's latency by phase, the noisy tenant's
throughput, 429s, and the latency breakdown (gateway queue from the decision records,
engine phases from vLLM's histograms)."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.noisy_neighbour.load import Sample
from gateway.backends.scrape.derive import histogram_delta
from gateway.backends.scrape.sample import MetricsSample


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class Window:
    start: float
    end: float

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end

    @property
    def seconds(self) -> float:
        return self.end - self.start


def victim_phase(samples: list[Sample], window: Window, cutoff: float) -> dict[str, Any]:
    """Victim turns started in ``window``. A turn still without a first token at
    ``cutoff`` (the run's end) counts in the TTFT percentiles with ``cutoff - start``, a
    lower bound (censored), so the slowest turns are never left out."""
    mine = [s for s in samples if s.tenant == "victim" and window.holds(s.started)]
    ok = [s for s in mine if s.status == 200 and s.e2e_s is not None]
    censored = [cutoff - s.started for s in mine if s.status in (0, 200) and s.ttft_s is None]
    ttft = [s.ttft_s for s in mine if s.status == 200 and s.ttft_s is not None] + censored
    e2e = [s.e2e_s for s in ok if s.e2e_s is not None]
    decode = [s.e2e_s - s.ttft_s for s in ok if s.e2e_s is not None and s.ttft_s is not None]
    return {
        "requests": len(ok),
        "req_s": len(ok) / window.seconds,
        "ttft_p50_ms": _ms(pct(ttft, 0.5)),
        "ttft_p99_ms": _ms(pct(ttft, 0.99)),
        "e2e_p50_ms": _ms(pct(e2e, 0.5)),
        "e2e_p99_ms": _ms(pct(e2e, 0.99)),
        "decode_p50_ms": _ms(pct(decode, 0.5)),  # first token to last: the engine's steps
        "decode_p99_ms": _ms(pct(decode, 0.99)),
        "censored": len(censored),
        "rejected": sum(1 for s in mine if s.status == 429),
        "errors": sum(1 for s in mine if s.status not in (0, 200, 429)),
    }


def rejections(samples: list[Sample], tenant: str, window: Window) -> dict[str, Any]:
    mine = [s for s in samples if s.tenant == tenant and window.holds(s.started)]
    after = [s.retry_after_s for s in mine if s.status == 429 and s.retry_after_s is not None]
    return {
        "429": sum(1 for s in mine if s.status == 429),
        "retry_after_p50_s": pct(after, 0.5),
        "retry_after_max_s": max(after) if after else None,
        "other_errors": sum(1 for s in mine if s.status not in (0, 200, 429)),
    }


def noisy_tokens_per_s(
    before: list[MetricsSample], after: list[MetricsSample], samples: list[Sample], window: Window
) -> float:
    """Output tokens the engines generated in the window, minus the victim's share."""
    total = sum(
        a.counters.get("generation_tokens", 0.0) - b.counters.get("generation_tokens", 0.0)
        for a, b in zip(after, before, strict=True)
    )
    victim = sum(
        s.completion_tokens for s in samples if s.tenant == "victim" and window.holds(s.ended)
    )
    return max(0.0, total - victim) / window.seconds


def engine_phases(before: list[MetricsSample], after: list[MetricsSample]) -> dict[str, Any]:
    """Mean seconds per request finished in the window, over all tenants and engines:
    engine queue (scheduled - arrived), prefill (first token - scheduled), decode."""
    out: dict[str, Any] = {}
    for field in ("queue_time", "prefill_time", "decode_time"):
        hists = [
            histogram_delta(b.histograms[field], a.histograms[field])
            for a, b in zip(after, before, strict=True)
            if field in a.histograms and field in b.histograms
        ]
        count = sum(h.count for h in hists)
        total = sum(h.sum for h in hists)
        out[f"engine_{field}_mean_ms"] = None if count <= 0 else 1000 * total / count
    return out


def gateway_queue(log: Path | None, samples: list[Sample], window: Window) -> dict[str, Any]:
    """The victim's wait in the gateway queue (decision records) and what TTFT holds
    beyond it (the engine's share: its queue, prefill, and the relay)."""
    if log is None:
        return {}
    ids = {
        s.request_id: s
        for s in samples
        if s.tenant == "victim" and window.holds(s.started) and s.ttft_s is not None
    }
    waits, engine = [], []
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{") or '"event":"request"' not in line:
            continue
        rec = json.loads(line)
        sample = ids.get(str(rec.get("request_id")))
        if sample is None or rec.get("queue_wait_s") is None or sample.ttft_s is None:
            continue
        waits.append(float(rec["queue_wait_s"]))
        engine.append(sample.ttft_s - float(rec["queue_wait_s"]))
    return {
        "victim_gateway_queue_p50_ms": _ms(pct(waits, 0.5)),
        "victim_gateway_queue_p99_ms": _ms(pct(waits, 0.99)),
        "victim_after_queue_p50_ms": _ms(pct(engine, 0.5)),
        "victim_after_queue_p99_ms": _ms(pct(engine, 0.99)),
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(1000 * value, 1)


def median_of(values: list[float | None]) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None
