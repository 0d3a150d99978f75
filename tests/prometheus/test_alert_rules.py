"""``promtool`` on the shipped alert rules: ``check rules``, and ``test rules`` with
alert_rules_test.yaml (every alert silent on quiet series, not firing inside its ``for:``,
firing after it). The pending state is proven, not assumed: with ``for:`` removed from every
rule, each alert fires at the time the shipped rules show it not yet firing."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus.processes import DEPLOY_PROMETHEUS

pytestmark = pytest.mark.prometheus

HERE = Path(__file__).parent
ALERTS = DEPLOY_PROMETHEUS / "alerts.yaml"
UNIT_TESTS = HERE / "alert_rules_test.yaml"

PENDING_AT = {
    "SluicegateAbsent": "6m",
    "SluicegateAllBackendsDown": "2m",
    "SluicegateShedRateHigh": "4m",
    "SluicegateBackendSignalsStale": "2m",
    "SluicegateConfigVersionsDiverge": "8m",
    "SluicegateCoreHalfCompiled": "3m",
    "SluicegateQueueOldestAboveDefaultDeadline": "2m",
    "SluicegateSharedStateDown": "2m",
}
"""For each alert with a ``for:``, the evaluation in alert_rules_test.yaml where its
condition holds but ``for:`` has not passed."""


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, check=False)


def _rules(without_for: bool) -> dict[str, Any]:
    rules: dict[str, Any] = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
            if without_for:
                rule.pop("for", None)
    return rules


def _run_unit_tests(tmp_path: Path, rules: dict[str, Any], tests: dict[str, Any]) -> str:
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = _promtool("test", "rules", str(tmp_path / "tests.yaml"))
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_shipped_rules_pass_promtool_check() -> None:
    done = _promtool("check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_is_tested_quiet_and_firing() -> None:
    names = {r["alert"] for g in _rules(False)["groups"] for r in g["rules"]}
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    firing = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    quiet = {c["alertname"] for t in tests for c in t["alert_rule_test"] if not c["exp_alerts"]}
    assert firing == quiet == names
    with_for = {r["alert"] for g in _rules(False)["groups"] for r in g["rules"] if "for" in r}
    assert set(PENDING_AT) == with_for


def test_promtool_unit_tests_pass_on_the_shipped_rules(tmp_path: Path) -> None:
    out = _run_unit_tests(tmp_path, _rules(False), yaml.safe_load(UNIT_TESTS.read_text()))
    assert "SUCCESS" in out


def test_the_alerts_are_pending_where_the_unit_tests_expect_no_firing(tmp_path: Path) -> None:
    """Without ``for:``, each alert fires at its pending time with the labels it later
    fires with: its condition already held there."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    variant = copy.deepcopy(tests)
    changed = set()
    for case in variant["tests"]:
        checks = case["alert_rule_test"]
        fired = {c["alertname"]: c["exp_alerts"] for c in checks if c["exp_alerts"]}
        for check in checks:
            name = check["alertname"]
            if name in fired and PENDING_AT.get(name) == check["eval_time"]:
                check["exp_alerts"] = fired[name]
                changed.add(name)
    assert changed == set(PENDING_AT)
    _run_unit_tests(tmp_path, _rules(True), variant)
