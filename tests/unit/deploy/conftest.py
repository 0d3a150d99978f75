"""A live gateway's metric names, read from its own ``/metrics`` after real traffic.

The app is built by ``create_app`` in front of fake vLLM backends (``httpx.MockTransport``)
with scraping on, fed a real vLLM 0.32 ``/metrics`` dump, and sent requests that exercise
the paths behind each family: one completed with usage, a deadline and a retry header, and
one refused (401). A family the gateway declares but has not yet seen samples of still
counts as exported, under the sample names its type produces.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config.schema import GatewayConfig
from tests.unit.gateway.fakes import API_KEY, FakeBackend, FakeFleet, make_config

REPO = Path(__file__).parents[3]
DEPLOY = REPO / "deploy"
DUMP = REPO / "tests" / "fixtures" / "vllm-0.32-metrics-under-load.txt"
CHAT = "/v1/chat/completions"

SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}


def exported_names(exposition: str) -> set[str]:
    """Sample names present, plus those each declared family's type implies."""
    names: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + s for s in SAMPLE_SUFFIXES.get(family.type, ("",)))
    return names


async def _drive_and_read(config: GatewayConfig, fleet: FakeFleet) -> str:
    app = create_app(config, transport=fleet.transport, background=False)
    async with app.router.lifespan_context(app):
        ctx = app.state.ctx
        assert await ctx.scraper.scrape_once("a")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            headers = {
                "authorization": f"Bearer {API_KEY}",
                "x-request-deadline-ms": "60000",
                "x-stainless-retry-count": "1",
            }
            ok = await client.post(CHAT, json=body, headers=headers)
            assert ok.status_code == 200
            refused = await client.post(CHAT, json=body, headers={"authorization": "Bearer no"})
            assert refused.status_code == 401
            return (await client.get("/metrics")).text


@pytest.fixture(scope="session")
def live_exposition() -> str:
    fleet = FakeFleet(FakeBackend("a"))
    fleet.backends["a"].metrics_text = DUMP.read_text()
    config = make_config(scrape={"enabled": True, "interval_s": 0.5})
    return asyncio.run(_drive_and_read(config, fleet))


@pytest.fixture(scope="session")
def live_metric_names(live_exposition: str) -> set[str]:
    return exported_names(live_exposition)


def load_yaml(path: Path) -> object:
    return yaml.safe_load(path.read_text())


def app_paths(config: GatewayConfig) -> set[str]:
    """The HTTP paths the gateway serves (no lifespan needed to list them)."""
    app = create_app(config, transport=FakeFleet().transport, background=False)
    return {route.path for route in app.routes if hasattr(route, "path")}
