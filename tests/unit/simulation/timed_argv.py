"""The timing and output options every simulate command's test passes."""

from __future__ import annotations

from pathlib import Path


def timed(out: Path, duration_s: int, warmup_s: int, *more: str) -> list[str]:
    """``--duration D --warmup W --out OUT``, then ``more``."""
    return ["--duration", str(duration_s), "--warmup", str(warmup_s), "--out", str(out), *more]
