"""What a run prints: per module its score and survivors, then a summary table (markdown, so
docs/mutation.md can take it as it is)."""

from __future__ import annotations

from scripts.mutation.runner import ModuleResult


def print_result(result: ModuleResult) -> None:
    print()  # ends the line of progress marks
    if result.error:
        print(f"{result.module}: ERROR {result.error}", flush=True)
        return
    print(f"{result.module}: {_score(result)}", flush=True)
    for o in result.outcomes:
        if o.status == "survived":
            print(f"  survived  line {o.mutant.line}  {o.mutant.key}", flush=True)


def print_summary(results: list[ModuleResult], threshold: float | None, seconds: float) -> int:
    """The table; returns the exit code (1: a module under ``threshold``, 2: an error)."""
    print("\n| module | mutants | equivalent | killed (timeout) | survived | score |")
    print("|---|---|---|---|---|---|")
    code = 0
    for r in results:
        if r.error:
            print(f"| `{r.module}` | - | - | - | - | error |")
            code = 2
            continue
        print(
            f"| `{r.module}` | {len(r.outcomes)} | {r.count('equivalent')} | "
            f"{r.count('killed', 'timeout')} ({r.count('timeout')}) | {r.count('survived')} | "
            f"{_score(r)} |"
        )
        if threshold is not None and r.score is not None and r.score < threshold:
            code = max(code, 1)
    total = [o for r in results for o in r.outcomes]
    print(f"\n{len(total)} mutants in {seconds:.0f} s")
    if code == 1:
        print(f"FAIL: a module kills under {threshold:.0f} % of its non-equivalent mutants")
    return code


def outcome_json(result: ModuleResult) -> dict[str, object]:
    return {
        "module": result.module,
        "error": result.error,
        "score": result.score,
        "outcomes": [
            {"key": o.mutant.key, "line": o.mutant.line, "status": o.status, "note": o.note}
            for o in result.outcomes
        ],
    }


def _score(result: ModuleResult) -> str:
    score = result.score
    return "none to judge" if score is None else f"{score:.1f} %"
