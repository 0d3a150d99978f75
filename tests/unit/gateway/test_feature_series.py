"""The optional features in /metrics: ``sluicegate_feature_enabled{feature}`` follows the
config in force (a reload switches the hot ones), and while agent runs or the async handoff
are on, their per-tenant counters and histogram exist at 0 before the first run or job;
while they are off, they are not exported (the dashboard's feature stat says why)."""

from __future__ import annotations

from pathlib import Path

import yaml

from gateway.async_jobs.store import TERMINAL
from gateway.config.schema import load_config
from gateway.metrics.features import FEATURES
from policies.runs.run import RunEnd
from tests.unit.gateway.conftest import Series, in_process, series
from tests.unit.gateway.fakes import FakeFleet, make_config

TENANTS = {"acme", "beta"}
RUN_SERIES = ("sluicegate_runs_started_total", "sluicegate_run_wasted_tokens_total")
ASYNC_SERIES = ("sluicegate_async_jobs_queued_total", "sluicegate_async_jobs_refused_total")


def _features(found: Series) -> dict[str, float]:
    return {dict(k)["feature"]: v for k, v in found["sluicegate_feature_enabled"].items()}


def _tenants(found: Series, name: str) -> set[str]:
    return {dict(k)["tenant"] for k in found[name]}


def _ends(found: Series, name: str, label: str) -> set[tuple[str, str]]:
    return {(dict(k)["tenant"], dict(k)[label]) for k in found[name]}


async def test_with_both_off_their_counters_are_absent_and_the_gauge_says_off(
    fleet: FakeFleet,
) -> None:
    async with in_process(make_config(policy={"runs": {"enabled": False}}), fleet) as h:
        found = series(h.ctx.metrics)
    assert _features(found) == {name: 0.0 for name, _ in FEATURES}
    for name in (*RUN_SERIES, *ASYNC_SERIES, "sluicegate_runs_ended_total"):
        assert not found[name], name
    assert not found["sluicegate_run_latency_seconds_count"]


async def test_with_both_on_every_tenant_has_its_series_at_zero(fleet: FakeFleet) -> None:
    config = make_config(policy={"runs": {"enabled": True}}, async_jobs={"enabled": True})
    async with in_process(config, fleet) as h:
        found = series(h.ctx.metrics)
    assert _features(found)["agent_runs"] == _features(found)["async_jobs"] == 1.0
    for name in (*RUN_SERIES, *ASYNC_SERIES, "sluicegate_run_latency_seconds_count"):
        assert _tenants(found, name) == TENANTS, name
        assert set(found[name].values()) == {0.0}, name
    assert _ends(found, "sluicegate_runs_ended_total", "end") == {
        (t, e.value) for t in TENANTS for e in RunEnd
    }
    assert _ends(found, "sluicegate_async_jobs_ended_total", "state") == {
        (t, s.value) for t in TENANTS for s in TERMINAL
    }


async def test_a_reload_that_switches_the_handoff_on_brings_its_series(
    tmp_path: Path, fleet: FakeFleet
) -> None:
    raw = make_config().model_dump(mode="json", exclude_unset=True)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw))
    async with in_process(load_config(path), fleet, config_path=path) as h:
        assert _features(series(h.ctx.metrics))["async_jobs"] == 0.0
        path.write_text(yaml.safe_dump({**raw, "async_jobs": {"enabled": True}}))
        assert h.ctx.reloader is not None and h.ctx.reloader.reload() is True
        found = series(h.ctx.metrics)
    assert _features(found)["async_jobs"] == 1.0
    assert _tenants(found, "sluicegate_async_jobs_queued_total") == TENANTS
