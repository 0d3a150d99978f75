"""A request that fans out (``n``, ``best_of``, a list of prompts) is charged for every
sequence it makes, refused beyond the ceiling, and corrected like with like at release."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from policies.estimate import FanOut
from policies.types import FlowKey
from tests.unit.gateway.conftest import Harness, auth, in_process
from tests.unit.gateway.fakes import FakeFleet, make_config

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "sluicegate.records"]


async def _post(h: Harness, path: str, **body: Any) -> None:
    r = await h.client.post(path, headers=auth(), json={"model": "tiny", **body})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    ("path", "body", "prompt", "output"),
    [
        # token ids: the prompt size is exact; 2 prompts x 3 choices x 4 tokens
        (COMPLETIONS, {"prompt": [[1, 2, 3], [4, 5]], "n": 3}, 5, 2 * 3 * 4),
        (COMPLETIONS, {"prompt": [7, 8, 9]}, 3, 4),
        # best_of generates 5 per prompt, of which n come back
        (COMPLETIONS, {"prompt": [[1, 2, 3], [4, 5]], "n": 3, "best_of": 5}, 5, 2 * 5 * 4),
    ],
    ids=["prompts-x-n", "one-token-id-prompt", "best-of"],
)
async def test_fan_out_is_charged_at_its_multiplicity(
    fleet: FakeFleet,
    caplog: pytest.LogCaptureFixture,
    path: str,
    body: dict[str, Any],
    prompt: int,
    output: int,
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    async with in_process(make_config(), fleet) as h:
        await _post(h, path, max_tokens=4, **body)
        assert h.ctx.scheduler.stats().charged_tokens == prompt + output
    (record,) = _records(caplog)
    assert (record["est_prompt_tokens"], record["est_output_tokens"]) == (prompt, output)


async def test_n_multiplies_a_chat_request_and_text_prompts_add_up(
    fleet: FakeFleet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sluicegate.records")
    msgs = [{"role": "user", "content": "hello there"}]
    for path, body in [
        (CHAT, {"messages": msgs}),
        (CHAT, {"messages": msgs, "n": 100}),
        (COMPLETIONS, {"prompt": "a" * 400}),
        (COMPLETIONS, {"prompt": ["a" * 400] * 3}),
    ]:
        async with in_process(make_config(), fleet) as h:  # each with a fresh estimator
            await _post(h, path, max_tokens=4, **body)
    one, many, single, three = _records(caplog)
    assert many["est_output_tokens"] == 100 * one["est_output_tokens"]
    assert many["est_prompt_tokens"] == one["est_prompt_tokens"]  # one prompt, prefilled once
    assert three["est_prompt_tokens"] == 3 * single["est_prompt_tokens"]
    assert three["est_output_tokens"] == 3 * single["est_output_tokens"]


CEILING_CASES = [
    ("n", CHAT, {"messages": [{"role": "user", "content": "x"}], "n": 129}, "n"),
    ("best_of", COMPLETIONS, {"prompt": "x", "best_of": 129}, "best_of"),
    ("prompts", COMPLETIONS, {"prompt": ["x"] * 129}, "prompt"),
    ("token-id-prompts", COMPLETIONS, {"prompt": [[1]] * 129}, "prompt"),
    ("product", COMPLETIONS, {"prompt": ["x"] * 11, "n": 12}, "n"),
]


@pytest.mark.parametrize(
    ("path", "body", "param"), [c[1:] for c in CEILING_CASES], ids=[c[0] for c in CEILING_CASES]
)
async def test_beyond_the_ceiling_is_a_400_naming_the_field(
    fleet: FakeFleet, path: str, body: dict[str, Any], param: str
) -> None:
    async with in_process(make_config(), fleet) as h:  # the default ceiling
        r = await h.client.post(path, headers=auth(), json={"model": "tiny", **body})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == param and error["code"] == "too_many_sequences"
        assert "at most 128" in error["message"]
        stats = h.ctx.scheduler.stats()
        assert stats.charged_tokens == 0 and stats.in_flight == 0 and stats.queued == 0
        assert h.backend("a").requests == []


async def test_the_ceiling_is_configurable(fleet: FakeFleet) -> None:
    config = make_config(server={"max_body_bytes": 4096, "max_sequences_per_request": 4})
    async with in_process(config, fleet) as h:
        await _post(h, COMPLETIONS, prompt=["x", "y"], n=2)
        r = await h.client.post(
            COMPLETIONS, headers=auth(), json={"model": "tiny", "prompt": ["x", "y"], "n": 3}
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"


async def test_release_corrects_with_the_work_of_every_generated_sequence(
    fleet: FakeFleet,
) -> None:
    """vLLM reports the returned choices; best_of generated more. The tenant pays for all."""
    async with in_process(make_config(), fleet) as h:
        await _post(h, COMPLETIONS, prompt=[1, 2, 3], n=2, best_of=4)
        reported = h.backend("a").usage_prompt + 2 * h.backend("a").tokens
        work = h.backend("a").usage_prompt + 4 * h.backend("a").tokens
        deficits = h.ctx.scheduler.stats().deficits
        assert deficits["acme"] == work != reported


async def test_the_flow_learns_output_per_sequence(fleet: FakeFleet) -> None:
    """Five requests of n=4 teach the flow the length of one sequence, not of four."""
    body = {"messages": [{"role": "user", "content": "hi"}]}
    async with in_process(make_config(), fleet) as h:
        for _ in range(5):
            await _post(h, CHAT, n=4, **body)
        flow = FlowKey("acme", "interactive", "tiny", "none")
        estimate = h.ctx.estimator.estimate("tiny", 40, flow=flow, fan_out=FanOut(1, 8, 8))
    assert estimate.output_tokens == 8 * h.backend("a").tokens
