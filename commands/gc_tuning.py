"""The garbage collector's settings for a serving process (``sluicegate serve``).

Fewer, cheaper collections: what exists at startup (modules, config, app) is frozen out of
every later collection, and the youngest generation is collected every ``GEN0_THRESHOLD``
allocations instead of Python's 700 (measured: ~3 % of the CPU per request was the collector,
mostly walking objects that live as long as the process). The decision micro-benchmark
applies the same settings, so it times the collector the gateway runs with.
"""

from __future__ import annotations

import gc

GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
