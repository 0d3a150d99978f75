"""The picker reads the request body as the HTTP front does (``gateway.request.body``):
the same size cap, the same 413 answer."""

from __future__ import annotations

import json

import httpx

from tests.unit.epp.envoy_double import CHAT, chat, picker, set_headers
from tests.unit.gateway.fakes import API_KEY, FakeBackend, FakeFleet, make_config


async def test_a_body_over_the_cap_is_the_http_fronts_413() -> None:
    fleet = FakeFleet(FakeBackend("a"))
    big = chat(messages=[{"role": "user", "content": "x" * 5000}])  # max_body_bytes: 4096
    async with picker(make_config(), fleet) as p:
        answer = await p.call().route(big)
        transport = httpx.ASGITransport(app=p.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            front = await http.post(CHAT, json=big, headers={"authorization": f"Bearer {API_KEY}"})
        assert answer.status.code == front.status_code == 413
        assert json.loads(answer.body) == front.json()
        assert set_headers(answer.headers)["x-sluicegate-reason"] == "body_too_large"
        assert not fleet.backends["a"].requests
