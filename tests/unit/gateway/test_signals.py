"""The backend pool merges the scraper's signals into the fleet snapshot the scheduler sees."""

from __future__ import annotations

from pathlib import Path

from gateway.app import create_app
from tests.unit.gateway.conftest import in_process
from tests.unit.gateway.fakes import FakeFleet, make_config

DUMP = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-metrics-under-load.txt"


async def test_scraped_signals_reach_the_snapshot_and_admin_view(fleet: FakeFleet) -> None:
    fleet.backends["a"].metrics_text = DUMP.read_text()
    config = make_config(scrape={"enabled": True, "interval_s": 0.5})
    async with in_process(config, fleet) as h:
        before = h.ctx.pool.snapshot().get("a")
        assert before is not None and before.stale  # never scraped: counts as saturated
        assert await h.ctx.scraper.scrape_once("a")
        view = h.ctx.pool.snapshot().get("a")
        assert view is not None and not view.stale
        # The dump says: vllm:num_requests_running 8.0, vllm:num_requests_waiting 12.0
        assert (view.running, view.waiting) == (8.0, 12.0)
        assert view.max_num_seqs == 1  # from the backend's config, not from metrics
        admin = (await h.client.get("/admin/backends")).json()
        assert [b["name"] for b in admin["backends"]] == ["a"]
        text = (await h.client.get("/metrics")).text
        assert "sluicegate_backend_" in text


async def test_the_gateway_scrapes_every_backend_before_it_serves(fleet: FakeFleet) -> None:
    """Stale counts as saturated: without a scrape before serving, the first requests after
    a start would be judged against a fleet that looks full and be delayed or degraded."""
    fleet.backends["a"].metrics_text = DUMP.read_text()
    config = make_config(scrape={"enabled": True, "interval_s": 1.0})
    app = create_app(config, transport=fleet.transport, background=True)
    async with app.router.lifespan_context(app):
        view = app.state.ctx.pool.snapshot().get("a")  # no await in between: startup alone
        assert view is not None and not view.stale
        assert view.waiting == 12.0  # read from the dump the backend served
