"""Prometheus text exposition → the raw series of the families we asked for.

Two parsers with one output shape, so the choice between them is a measurement
(``bench/scrape_parse.py``), not a belief:

- ``parse_narrow``: a line scanner that looks only at the wanted sample names and parses
  labels only for those lines. It is the one the scraper uses.
- ``parse_reference``: ``prometheus_client.parser``, the well-kept parser, kept as the
  oracle the narrow one is tested against.

Neither raises on garbage: a line that does not parse is skipped and counted.
"""

from __future__ import annotations

import functools
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.backends.scrape.engines import EngineMetrics

Labels = dict[str, str]
Series = list[tuple[Labels, float]]
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
DEFAULT_MAX_SAMPLES = 5_000
"""A real vLLM 0.32 body has ~190 wanted samples per engine: room for ~25 engines."""

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?[ \t]*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(slots=True)
class RawSeries:
    """Sample name (with any ``_bucket``/``_sum``/``_count`` suffix) → its series."""

    series: dict[str, Series] = field(default_factory=dict)
    bad_lines: int = 0
    truncated: bool = False
    """More wanted samples than ``max_samples``: parsing stopped, the result is partial."""
    count: int = 0

    def add(self, name: str, labels: Labels, value: float) -> None:
        self.series.setdefault(name, []).append((labels, value))
        self.count += 1


def wanted_names(engine: EngineMetrics) -> frozenset[str]:
    """Every sample name that feeds a signal for ``engine``."""
    names = set(engine.gauges()) | set(engine.counters())
    for family in engine.histograms():
        names.update(family + suffix for suffix in HISTOGRAM_SUFFIXES)
    return frozenset(names)


def parse_narrow(
    text: str, wanted: frozenset[str], max_samples: int = DEFAULT_MAX_SAMPLES
) -> RawSeries:
    """Extract only ``wanted`` samples; cost is one ``str.find`` per uninteresting line.

    Stops (``truncated``) after ``max_samples`` wanted samples, so a hostile body made of
    wanted names costs bounded work.
    """
    out = RawSeries()
    # line by line rather than splitlines(): one C call over a 4 MiB body would hold the
    # GIL for ~40 ms, stalling the event loop even though we parse in a worker thread
    for raw_line in io.StringIO(text):
        line = raw_line.rstrip("\r\n")
        if not line or line[0] == "#":
            continue
        name = _sample_name(line)
        if name not in wanted:
            continue
        if out.count >= max_samples:
            out.truncated = True
            break
        parsed = _parse_line(line)
        if parsed is None:
            out.bad_lines += 1
            continue
        out.add(*parsed)
    return out


def _sample_name(line: str) -> str:
    end = line.find("{")
    if end == -1:
        end = line.find(" ")
    return line[:end] if end != -1 else line


def _parse_line(line: str) -> tuple[str, Labels, float] | None:
    match = _LINE.match(line)
    if match is None:
        return None
    name, label_text, value_text = match.groups()
    try:
        value = float(value_text)
    except ValueError:
        return None
    return name, _parse_labels(label_text or ""), value


@functools.lru_cache(maxsize=4096)
def _parse_labels(text: str) -> Labels:
    """``a="x",b="y"`` → dict. Without backslashes no value can hide a quote: split fast.

    Cached: a server repeats the same label sets every scrape, only values change.
    The returned dict is shared, so callers must not mutate it.
    """
    if not text:
        return {}
    if "\\" in text:
        return {k: _unescape(v) for k, v in _LABEL.findall(text)}
    labels: Labels = {}
    for part in text.rstrip(",").split('",'):
        key, sep, value = part.partition('="')
        if not sep:
            return {k: v for k, v in _LABEL.findall(text)}  # odd spacing: slow path
        labels[key.strip()] = value[:-1] if value.endswith('"') else value
    return labels


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse_reference(text: str, wanted: frozenset[str]) -> RawSeries:
    """The same extraction through ``prometheus_client``; raises nothing on garbage."""
    from prometheus_client.parser import text_string_to_metric_families

    out = RawSeries()
    try:
        for family in text_string_to_metric_families(text):
            _add_samples(out, family.samples, wanted)
    except ValueError:
        out.bad_lines += 1  # the reference parser gives up on the first bad line
    return out


def _add_samples(out: RawSeries, samples: Iterable[object], wanted: frozenset[str]) -> None:
    for sample in samples:
        name: str = sample.name  # type: ignore[attr-defined]
        if name in wanted:
            value = float(sample.value)  # type: ignore[attr-defined]
            out.add(name, dict(sample.labels), value)  # type: ignore[attr-defined]


def is_finite(value: float) -> bool:
    return not (math.isnan(value) or math.isinf(value))
