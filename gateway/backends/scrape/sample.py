"""One scrape, reduced to the engine-agnostic values that drive decisions.

Keys are ``EngineMetrics`` field names (``"queue_time"``, ``"preemptions"``…), never
metric names, so everything downstream works for any engine with a table.
Series of one family are aggregated across the ``engine``/``model_name`` labels of a
data-parallel server: counts and counters are summed, KV usage takes the fullest engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.backends.scrape.engines import EngineMetrics
from gateway.backends.scrape.parse import RawSeries, Series, is_finite

COUNTER_FIELDS = (
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "steps",
    "request_success",
    "admission_rejections",
    "prefix_cache_queries",
    "prefix_cache_hits",
)
HISTOGRAM_FIELDS = (
    "queue_time",
    "prefill_time",
    "decode_time",
    "inference_time",
    "e2e_latency",
    "ttft",
    "prompt_tokens_per_request",
    "generation_tokens_per_request",
    "inter_token_latency",
)


@dataclass(frozen=True, slots=True)
class Histogram:
    """Cumulative Prometheus histogram. ``bounds`` ascend and end with +Inf."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True, slots=True)
class MetricsSample:
    """What one /metrics body said. A None / missing key = family not exported."""

    running: float | None = None
    waiting: float | None = None
    waiting_by_reason: Mapping[str, float] = field(default_factory=dict)
    kv_cache_usage: float | None = None
    kv_cache_tokens: float | None = None
    counters: Mapping[str, float] = field(default_factory=dict)
    """Counter field name → value summed over label values (e.g. all reasons)."""
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    kv_block_size: int | None = None
    """Tokens per KV block (``block_size`` of the cache-config info gauge)."""

    @property
    def families_found(self) -> int:
        gauges = (self.running, self.waiting, self.kv_cache_usage, self.kv_cache_tokens)
        return sum(g is not None for g in gauges) + len(self.counters) + len(self.histograms)


def extract(raw: RawSeries, engine: EngineMetrics) -> MetricsSample:
    """Reduce parsed series to a ``MetricsSample`` using ``engine``'s names."""
    get = raw.series.get
    return MetricsSample(
        running=_total(get(engine.running or "")),
        waiting=_total(get(engine.waiting or "")),
        waiting_by_reason=_by_label(get(engine.waiting_by_reason or ""), "reason"),
        kv_cache_usage=_fullest(get(engine.kv_cache_usage or "")),
        kv_cache_tokens=_kv_cache_tokens(get(engine.cache_config_info or "")),
        kv_block_size=_kv_block_size(get(engine.cache_config_info or "")),
        counters=_counters(raw, engine),
        histograms=_histograms(raw, engine),
    )


def _total(series: Series | None) -> float | None:
    if not series:
        return None
    return sum(v for _, v in series if is_finite(v))


def _fullest(series: Series | None) -> float | None:
    if not series:
        return None
    return max(v for _, v in series)


def _by_label(series: Series | None, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in series or ():
        key = labels.get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out


def _kv_cache_tokens(series: Series | None) -> float | None:
    """KV-cache capacity in tokens from the info labels, summed over engines.

    ``kv_cache_size_tokens`` when present, else ``num_gpu_blocks * block_size``.
    """
    total = 0.0
    for labels, _ in series or ():
        tokens = _number(labels.get("kv_cache_size_tokens"))
        if tokens is None:
            blocks, size = _number(labels.get("num_gpu_blocks")), _number(labels.get("block_size"))
            tokens = blocks * size if blocks is not None and size is not None else None
        if tokens is None:
            return None
        total += tokens
    return total or None


def _kv_block_size(series: Series | None) -> int | None:
    """The engines' ``block_size`` (the smallest, should they differ); None when unset."""
    sizes = [_number(labels.get("block_size")) for labels, _ in series or ()]
    known = [int(s) for s in sizes if s is not None and s >= 1]
    return min(known) if known else None


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None  # vLLM writes "None" for unset values


def _counters(raw: RawSeries, engine: EngineMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in COUNTER_FIELDS:
        family = getattr(engine, name)
        value = _total(raw.series.get(family)) if family else None
        if value is not None:
            out[name] = value
    return out


def _histograms(raw: RawSeries, engine: EngineMetrics) -> dict[str, Histogram]:
    out: dict[str, Histogram] = {}
    for name in HISTOGRAM_FIELDS:
        family = getattr(engine, name)
        hist = _histogram(raw, family) if family else None
        if hist is not None:
            out[name] = hist
    return out


def _histogram(raw: RawSeries, family: str) -> Histogram | None:
    by_bound: dict[float, float] = {}
    for labels, value in raw.series.get(family + "_bucket", ()):
        bound = _number(labels.get("le"))
        if bound is not None:
            by_bound[bound] = by_bound.get(bound, 0.0) + value
    count, total = (
        _total(raw.series.get(family + "_count")),
        _total(raw.series.get(family + "_sum")),
    )
    if not by_bound or count is None or total is None or float("inf") not in by_bound:
        return None
    bounds = tuple(sorted(by_bound))
    return Histogram(bounds, tuple(by_bound[b] for b in bounds), total, count)
