"""Error of ``TokenEstimator`` against a real tokenizer and chat template.

    python -m bench.estimator_error                 # 400 requests, seed 7, the tiny model
    python -m bench.estimator_error --requests 1000 --seed 3

Ground truth: the tiny model built by ``scripts/vllm/build_model.py`` (a byte-level BPE with a
chat template, in ``$HOME/.cache/sluicegate/models/tiny``). Its tokenizer needs
``transformers``, which lives in the vLLM venv, so the actual prompt-token counts are computed
in one subprocess of that venv's python (template rendered to text, then encoded, as vLLM's
chat endpoint does); everything else runs here, in the system python.

Corpus (seeded, built locally): chat requests whose content is code (slices of Python stdlib
sources), prose (stdlib docstrings) or JSON tool output (generated records), short and long,
one to six messages, sometimes with a system prompt. They go through ``gateway.request.inbound.
parse_body`` for ``prompt_chars`` and then through ``estimate()``/``observe()`` in order, as the
gateway does. The same requests are also sized with the static 4 chars/token prior.

Output tokens: actual lengths drawn from the ``rx9070xt`` profile's coding-turn mixture, one
flow, with ``max_tokens`` unset (context bound only) and set by the client.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import statistics
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulator.profile import load_profile
from gateway.request.inbound import CHAT, parse_body
from policies.estimate import TokenEstimator
from policies.types import Usage
from scripts.vllm.serve import model_cache, vllm_venv

MODEL = "tiny"
CACHE = model_cache()
VENV_PYTHON = vllm_venv() / "bin" / "python"
STATIC_PRIOR = 4.0
COLD, WARM_FROM = 20, 100
KINDS = ("code", "prose", "json")

# Runs in the vLLM venv: one JSON list of conversations on stdin, their token counts on stdout.
_COUNTER = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
counts = []
for messages in json.load(sys.stdin):
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    counts.append(len(tok(text, add_special_tokens=False)["input_ids"]))
json.dump(counts, sys.stdout)
"""


@dataclass(frozen=True)
class Sample:
    kind: str
    messages: list[dict[str, str]]


class Corpus:
    """Seeded content pieces of each kind, sliced from the local Python stdlib."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(p for p in stdlib.glob("*.py") if p.stat().st_size > 4000)
        self.sources = [p.read_text(encoding="utf-8", errors="replace") for p in files[:80]]
        self.docstrings = [d for src in self.sources for d in _docstrings(src) if len(d) > 80]

    def piece(self, kind: str, chars: int) -> str:
        """About ``chars`` characters of one kind of content."""
        if kind == "code":
            lines = self.rng.choice(self.sources).splitlines()
            start = self.rng.randrange(max(1, len(lines) - 20))
            return _take_lines(lines[start:], chars)
        if kind == "prose":
            out: list[str] = []
            while sum(map(len, out)) < chars:
                out.append(self.rng.choice(self.docstrings))
            return "\n\n".join(out)[: max(chars, 80)]
        return self._json(chars)

    def _json(self, chars: int) -> str:
        records: list[dict[str, Any]] = []
        while len(json.dumps(records)) < chars:
            records.append(self._record(len(records)))
        return json.dumps(
            {"results": records, "count": len(records)}, indent=self.rng.choice([None, 2])
        )

    def _record(self, i: int) -> dict[str, Any]:
        word = self.rng.choice(self.docstrings).split()
        return {
            "id": f"{self.rng.getrandbits(48):012x}",
            "index": i,
            "name": " ".join(word[:3]),
            "score": round(self.rng.uniform(0, 100), 3),
            "ok": self.rng.random() < 0.8,
            "tags": self.rng.sample(["io", "net", "db", "ui", "auth", "cache"], 2),
            "path": f"/srv/app/{self.rng.choice(word).strip('.,()')}/{i}.py",
        }


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    nodes = [
        n for n in ast.walk(tree) if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
    ]
    return [d for n in nodes if (d := ast.get_docstring(n))]


def _take_lines(lines: Sequence[str], chars: int) -> str:
    out: list[str] = []
    total = 0
    for line in lines:
        if total >= chars:
            break
        out.append(line)
        total += len(line) + 1
    return "\n".join(out)


_ASKS = {
    "code": ["Review this code and point out bugs:", "Refactor this function:", "Explain:"],
    "prose": ["Summarise the following text.", "Rewrite this more simply:", "Translate:"],
    "json": ["Here is the tool output. Which entries failed?", "Tool result:", "Parse this:"],
}


def build_samples(corpus: Corpus, n: int) -> list[Sample]:
    """``n`` conversations; content lengths log-uniform between 40 and 6,000 characters."""
    rng = corpus.rng
    samples = []
    for _ in range(n):
        kind = rng.choice(KINDS)
        messages: list[dict[str, str]] = []
        if rng.random() < 0.4:
            messages.append({"role": "system", "content": "You are a careful coding assistant."})
        for turn in range(rng.choice([1, 1, 1, 2, 3])):
            if turn:
                messages.append(
                    {"role": "assistant", "content": corpus.piece(kind, _length(rng) // 2)}
                )
            ask = rng.choice(_ASKS[kind])
            messages.append(
                {"role": "user", "content": f"{ask}\n\n{corpus.piece(kind, _length(rng))}"}
            )
        samples.append(Sample(kind, messages))
    return samples


def _length(rng: random.Random) -> int:
    return int(math.exp(rng.uniform(math.log(40), math.log(6000))))


def actual_prompt_tokens(samples: Sequence[Sample], model_dir: Path) -> list[int]:
    payload = json.dumps([s.messages for s in samples])
    done = subprocess.run(
        [str(VENV_PYTHON), "-c", _COUNTER, str(model_dir)],
        input=payload,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    counts: list[int] = json.loads(done.stdout)
    return counts


def prompt_chars(sample: Sample) -> int:
    body = {"model": MODEL, "messages": sample.messages}
    return parse_body(CHAT, body, {MODEL}, lambda _m: None).prompt_chars


@dataclass(frozen=True)
class Row:
    kind: str
    chars: int
    actual: int
    calibrated: int  # estimate made before observing this request
    static: int


def run_prompts(samples: Sequence[Sample], actual: Sequence[int]) -> list[Row]:
    """Feed requests in order through one estimator, exactly as the gateway does."""
    est = TokenEstimator()
    rows = []
    for sample, tokens in zip(samples, actual, strict=True):
        chars = prompt_chars(sample)
        guess = est.estimate(MODEL, chars).prompt_tokens
        rows.append(Row(sample.kind, chars, tokens, guess, max(1, math.ceil(chars / STATIC_PRIOR))))
        est.observe(MODEL, chars, Usage(tokens, 1))
    return rows


def _stats(pairs: Sequence[tuple[int, int]]) -> tuple[float, float, float, float, float, float]:
    """(MAPE, p50, p90, p99 of |error|, signed bias, sum(est)/sum(actual)); errors in %."""
    errs = [100.0 * (e - a) / a for e, a in pairs]
    absolute = sorted(abs(x) for x in errs)
    q = (
        statistics.quantiles(absolute, n=100, method="inclusive")
        if len(absolute) > 1
        else absolute * 99
    )
    ratio = sum(e for e, _ in pairs) / sum(a for _, a in pairs)
    return statistics.fmean(absolute), q[49], q[89], q[98], statistics.fmean(errs), ratio


_COLUMNS = ("n", "MAPE%", "p50%", "p90%", "p99%", "bias%", "Σest/Σact")
_WIDTHS = (5, 8, 7, 7, 7, 8, 10)
HEADER = f"{'slice':<28}" + "".join(f"{c:>{w}}" for c, w in zip(_COLUMNS, _WIDTHS, strict=True))


def _line(label: str, pairs: Sequence[tuple[int, int]]) -> str:
    mape, p50, p90, p99, bias, ratio = _stats(pairs)
    cells = f"{mape:>8.1f}{p50:>7.1f}{p90:>7.1f}{p99:>7.1f}{bias:>+8.1f}{ratio:>10.2f}"
    return f"{label:<28}{len(pairs):>5}{cells}"


def _warm_kind(kind: str) -> Callable[[int, Row], bool]:
    return lambda i, r: i >= WARM_FROM and r.kind == kind


def prompt_table(rows: Sequence[Row]) -> list[str]:
    slices: list[tuple[str, Callable[[int, Row], bool]]] = [
        ("all", lambda i, r: True),
        (f"cold (first {COLD})", lambda i, r: i < COLD),
        (f"warm (from #{WARM_FROM})", lambda i, r: i >= WARM_FROM),
        *[(f"warm {k}", _warm_kind(k)) for k in KINDS],
    ]
    out = [HEADER]
    for label, keep in slices:
        chosen = [r for i, r in enumerate(rows) if keep(i, r)]
        out.append(_line(f"cal  {label}", [(r.calibrated, r.actual) for r in chosen]))
        out.append(_line(f"4.0  {label}", [(r.static, r.actual) for r in chosen]))
    return out


def output_table(rng: random.Random, n: int, context: int, caps: Sequence[int | None]) -> list[str]:
    """Expected vs actual output for one flow whose lengths follow the coding-turn mixture."""
    mixture = load_profile("rx9070xt").output_lengths.components
    weights = [c.weight for c in mixture]
    out = [HEADER]
    for cap in caps:
        local = random.Random(rng.random())
        est = TokenEstimator()
        pairs = []
        for _ in range(n):
            comp = local.choices(mixture, weights)[0]
            actual = local.randint(comp.min_tokens, comp.max_tokens)
            actual = actual if cap is None else min(cap, actual)
            guess = est.estimate(MODEL, 2000, max_tokens=cap, max_model_len=context, flow="f")
            pairs.append((guess.output_tokens, actual))
            est.observe(
                MODEL, 2000, Usage(500, actual), flow="f", expected_output=guess.output_tokens
            )
        label = "max_tokens unset" if cap is None else f"max_tokens={cap}"
        out.append(_line(f"out  {label}", pairs))
        out.append(_line(f"out  {label} warm", pairs[WARM_FROM:]))
    return out


def _ratios(rows: Sequence[Row]) -> str:
    """Median actual chars per token of each kind of content (JSON framing included)."""
    median = {k: statistics.median(r.chars / r.actual for r in rows if r.kind == k) for k in KINDS}
    return ", ".join(f"{k} {v:.2f}" for k, v in median.items())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    model_dir = CACHE / MODEL
    if not (model_dir / "tokenizer.json").exists() or not VENV_PYTHON.exists():
        print(
            f"needs {model_dir} (scripts/vllm/build_model.py tiny) and {VENV_PYTHON}",
            file=sys.stderr,
        )
        return 2
    rng = random.Random(args.seed)
    samples = build_samples(Corpus(rng), args.requests)
    rows = run_prompts(samples, actual_prompt_tokens(samples, model_dir))
    chars = sorted(r.chars for r in rows)
    print(
        f"{len(rows)} chat requests, seed {args.seed}: prompt chars p50 {chars[len(chars) // 2]},"
    )
    print(f"max {chars[-1]}; actual chars/token {_ratios(rows)}")
    print("prompt tokens (cal = calibrated EWMA estimate before observing; 4.0 = static prior):")
    print("\n".join(prompt_table(rows)))
    context = load_profile("rx9070xt").engine.max_model_len
    print(f"\noutput tokens, coding-turn mixture, one flow, max_model_len {context}:")
    print("\n".join(output_table(rng, args.requests, context, [None, 2048, 1024])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
