"""Fit a profile's step-time model to measurements of a real vLLM server.

Input: the JSON written by ``python -m scripts.vllm.measure`` (default
``bench/data/vllm-cpu-medium.json``): streamed completions with exact lengths, in three phases.

* Context: ``long_context`` decodes one stream after a long prompt. Its extra inter-token time
  over the short-prompt single stream of ``concurrency``, per extra context token, is
  ``per_context_token_s`` (a step of c sequences reads about ``c * (prompt + output / 2)``).
  Measured directly because in a joint fit the sweep's context grows with c and the two
  parameters trade off (a joint fit priced context about 2x too low on the shipped data).
* Decode: ``concurrency`` runs c short-prompt streams together; their inter-token interval,
  less the context cost, is one decode step: a line over c gives ``base_s`` and
  ``per_decode_seq_s``.
* Prefill: ``prompt_length`` sends one request at a time; prompts fit in one chunk, so TTFT is
  one prefill step and its slope over prompt length is ``per_prefill_token_s``.

Then every phase is replayed on the fitted ``Engine`` and the predicted medians are printed
next to the measured ones, so the fit's error is visible::

    python -m emulator.fit bench/data/vllm-cpu-medium.json --profile cpu-medium
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from emulator.engine import Engine
from emulator.profile import EngineConfig, StepTimeModel, load_profile

DEFAULT_INPUT = Path(__file__).resolve().parents[1] / "bench" / "data" / "vllm-cpu-medium.json"


def _itl(sample: dict[str, Any]) -> float:
    return float(sample["decode_s"]) / max(1, int(sample["output_tokens"]) - 1)


def _median_by(samples: list[dict[str, Any]], key: str, value: Any) -> dict[int, float]:
    groups: dict[int, list[float]] = {}
    for s in samples:
        groups.setdefault(int(s[key]), []).append(value(s))
    return {k: statistics.median(v) for k, v in sorted(groups.items())}


def _decode_groups(samples: list[dict[str, Any]], phase: str) -> dict[tuple[int, int, int], float]:
    """(concurrency, prompt, output) -> median inter-token interval (s) for one phase."""
    groups: dict[tuple[int, int, int], list[float]] = {}
    for s in samples:
        if s["phase"] == phase and int(s["output_tokens"]) > 1:
            key = (int(s["concurrency"]), int(s["prompt_tokens"]), int(s["output_tokens"]))
            groups.setdefault(key, []).append(_itl(s))
    return {k: statistics.median(v) for k, v in sorted(groups.items())}


def _batch_context(concurrency: int, prompt: int, output: int) -> float:
    """Mean KV tokens a decode step reads: every sequence, halfway through its output."""
    return concurrency * (prompt + output / 2)


def fit_step_time(samples: list[dict[str, Any]]) -> StepTimeModel:
    """Step-time parameters from measure.py's raw samples (seconds), fitted in three steps."""
    sweep = _decode_groups(samples, "concurrency")
    long_ctx = _decode_groups(samples, "long_context")
    per_context = 0.0
    single = {k: v for k, v in sweep.items() if k[0] == 1}
    if long_ctx and single:
        (lk, litl), (sk, sitl) = next(iter(long_ctx.items())), next(iter(single.items()))
        extra = _batch_context(*lk) - _batch_context(*sk)
        per_context = max(0.0, (litl - sitl) / extra) if extra > 0 else 0.0
    xs = [float(c) for c, _, _ in sweep]
    ys = [itl - per_context * _batch_context(*k) for k, itl in sweep.items()]
    per_seq, base = statistics.linear_regression(xs, ys)
    plen = [s for s in samples if s["phase"] == "prompt_length"]
    ttft_by_n = _median_by(plen, "prompt_tokens", lambda s: float(s["ttft_s"]))
    per_prefill, _ = statistics.linear_regression(list(ttft_by_n), list(ttft_by_n.values()))
    return StepTimeModel(
        base_s=max(0.0, base),
        per_decode_seq_s=max(0.0, per_seq),
        per_prefill_token_s=max(0.0, per_prefill),
        per_context_token_s=per_context,
    )


def replay(config: EngineConfig, concurrency: int, prompt: int, output: int) -> tuple[float, float]:
    """(median TTFT, median inter-token interval) of one batch of identical requests."""
    engine = Engine(config)
    for i in range(concurrency):
        engine.add(f"r{i}", prompt, output, now=0.0)
    now, ttfts, itls = 0.0, [], []
    while engine.has_work:
        step = engine.step(now)
        now = step.ended_at
        ttfts += list(step.ttft_s.values())
        itls += list(step.inter_token_latencies_s)
    return statistics.median(ttfts), statistics.median(itls) if itls else 0.0


def compare(config: EngineConfig, samples: list[dict[str, Any]]) -> list[str]:
    """Measured against predicted, per phase and size: one line each."""
    lines = [
        f"{'phase':<14}{'c':>3}{'prompt':>7}{'out':>5}  {'ttft real/emu':>17}  {'itl real/emu':>17}"
    ]
    groups: dict[tuple[str, int, int, int], list[dict[str, Any]]] = {}
    for s in samples:
        if s["phase"] != "warmup":
            key = (s["phase"], s["concurrency"], s["prompt_tokens"], s["output_tokens"])
            groups.setdefault(key, []).append(s)
    for (phase, c, p, o), group in sorted(groups.items()):
        real_ttft = statistics.median(float(s["ttft_s"]) for s in group)
        real_itl = statistics.median(_itl(s) for s in group)
        emu_ttft, emu_itl = replay(config, c, p, o)
        lines.append(
            f"{phase:<14}{c:>3}{p:>7}{o:>5}  {real_ttft:8.4f}/{emu_ttft:<8.4f}  "
            f"{real_itl:8.4f}/{emu_itl:<8.4f}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emulator.fit", description=__doc__)
    parser.add_argument("measurements", nargs="?", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--profile", default="cpu-medium", help="profile whose engine to refit")
    args = parser.parse_args(argv)
    report = json.loads(args.measurements.read_text(encoding="utf-8"))
    samples: list[dict[str, Any]] = report["samples"]
    fitted = fit_step_time(samples)
    config = load_profile(args.profile).engine.model_copy(update={"step_time": fitted})
    print(f"server: {report.get('server')}  load avg: {report.get('load_average_1m')}")
    print("step_time:")
    for name, value in fitted.model_dump().items():
        print(f"  {name}: {value:.6g}")
    print("\n".join(compare(config, samples)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
