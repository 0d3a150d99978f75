"""Summarise one tier of a pytest JUnit XML report in one line, e.g. ``12 ran (12 passed)``.

    python scripts/junit_tier.py REPORT.xml tests.vllm

A test counts as *ran* when it was not skipped; the tier is chosen by classname prefix.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter


def tier_summary(report_path: str, classname_prefix: str) -> str:
    outcomes: Counter[str] = Counter()
    for case in ET.parse(report_path).getroot().iter("testcase"):
        if not case.get("classname", "").startswith(classname_prefix):
            continue
        kinds = {child.tag for child in case} & {"failure", "error", "skipped"}
        outcomes[next(iter(sorted(kinds)), "passed")] += 1
    ran = sum(n for kind, n in outcomes.items() if kind != "skipped")
    detail = ", ".join(f"{n} {kind}" for kind, n in sorted(outcomes.items()))
    return f"{ran} ran ({detail or 'none collected'})"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    print(tier_summary(argv[0], argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
