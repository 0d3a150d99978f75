"""Mutation testing of the decision core: each mutant of a module (scripts/mutation/operators.py)
runs against the unit tests mutation.toml maps to that module; prints each module's score, the
share of non-equivalent mutants killed, and the survivors with their keys (docs/mutation.md).

    python3 scripts/mutate.py [MODULE ...] [--jobs 2] [--slice] [--fail-under 90] [--list]

No MODULE: every module in mutation.toml. --slice: the CI slice (mutation.toml [slice]).
Exit 1 when a module scores below --fail-under (the slice always checks mutation.toml's
fail_under), 2 when a module's unmutated tests fail."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.mutation.config import Config, load  # noqa: E402
from scripts.mutation.operators import Mutant, mutants  # noqa: E402
from scripts.mutation.report import outcome_json, print_result, print_summary  # noqa: E402
from scripts.mutation.runner import ModuleResult, in_slice, run_module  # noqa: E402


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="module paths (default: all in mutation.toml)")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once (default 1)")
    parser.add_argument("--slice", action="store_true", help="the CI slice of mutation.toml")
    parser.add_argument("--fail-under", type=float, default=None, help="minimum score, percent")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--json", type=Path, default=None, help="write every outcome here")
    return parser.parse_args(argv)


def _selected(config: Config, args: argparse.Namespace) -> dict[str, list[Mutant]]:
    names = args.modules or (config.slice_modules if args.slice else list(config.modules))
    unknown = [n for n in names if n not in config.modules]
    if unknown:
        raise SystemExit(f"not in mutation.toml [modules]: {', '.join(unknown)}")
    every = config.slice_every if args.slice else 1
    return {n: [m for m in mutants(n, (ROOT / n).read_text()) if in_slice(m, every)] for n in names}


def _stale(config: Config, selected: dict[str, list[Mutant]]) -> list[str]:
    keys = {(m.module, m.key) for ms in selected.values() for m in ms}
    return [
        f"{mod}: {key}"
        for (mod, key) in config.equivalents
        if mod in selected and (mod, key) not in keys
    ]


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    config = load(ROOT)
    selected = _selected(config, args)
    if args.list:
        for ms in selected.values():
            for m in ms:
                print(f"{m.module}:{m.line}  {m.key}")
        return 0
    results: list[ModuleResult] = []
    started = time.monotonic()
    for name, ms in selected.items():
        tests = config.modules[name]
        result = run_module(ROOT, name, tests, ms, config.equivalents, args.jobs, config.plugins)
        print_result(result)
        results.append(result)
    threshold = config.fail_under if args.slice else args.fail_under
    code = print_summary(results, threshold, time.monotonic() - started)
    if not args.slice:
        for line in _stale(config, selected):
            print(f"stale entry in {config.equivalents_path.name} (no such mutant): {line}")
    if args.json is not None:
        args.json.write_text(json.dumps([outcome_json(r) for r in results], indent=1))
    return code


if __name__ == "__main__":
    sys.exit(main())
