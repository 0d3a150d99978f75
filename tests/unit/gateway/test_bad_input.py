"""Every bad request gets a 4xx in the OpenAI error shape; nothing forwarded, nothing taken."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.app import create_app
from tests.unit.gateway.conftest import Harness, auth, in_process
from tests.unit.gateway.fakes import FakeFleet, make_config

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hello"}]


def _ok(**extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": MSG, **extra}


CASES: list[tuple[str, str, Any, dict[str, str], int, str | None]] = [
    # id, path, body (bytes or json), extra headers, status, param
    ("malformed-json", CHAT, b'{"model": "tiny", ', {}, 400, None),
    ("not-an-object", CHAT, b"[1, 2]", {}, 400, None),
    ("not-utf8", CHAT, b'{"model": "\xff\xfe"}', {}, 400, None),
    ("missing-model", CHAT, {"messages": MSG}, {}, 400, "model"),
    ("model-not-string", CHAT, {"model": 7, "messages": MSG}, {}, 400, "model"),
    ("unknown-model", CHAT, {"model": "gpt-9", "messages": MSG}, {}, 404, "model"),
    ("missing-messages", CHAT, {"model": "tiny"}, {}, 400, "messages"),
    ("empty-messages", CHAT, {"model": "tiny", "messages": []}, {}, 400, "messages"),
    (
        "message-no-role",
        CHAT,
        {"model": "tiny", "messages": [{"content": "x"}]},
        {},
        400,
        "messages[0]",
    ),
    (
        "content-wrong-type",
        CHAT,
        {"model": "tiny", "messages": [{"role": "user", "content": 5}]},
        {},
        400,
        "messages[0].content",
    ),
    ("missing-prompt", "/v1/completions", {"model": "tiny"}, {}, 400, "prompt"),
    (
        "prompt-wrong-type",
        "/v1/completions",
        {"model": "tiny", "prompt": {"a": 1}},
        {},
        400,
        "prompt",
    ),
    ("stream-not-bool", CHAT, _ok(stream="yes"), {}, 400, "stream"),
    ("max-tokens-zero", CHAT, _ok(max_tokens=0), {}, 400, "max_tokens"),
    ("max-tokens-negative", CHAT, _ok(max_tokens=-5), {}, 400, "max_tokens"),
    ("max-tokens-string", CHAT, _ok(max_tokens="10"), {}, 400, "max_tokens"),
    ("max-tokens-bool", CHAT, _ok(max_tokens=True), {}, 400, "max_tokens"),
    ("max-tokens-over-limit", CHAT, _ok(max_tokens=2049), {}, 400, "max_tokens"),
    (
        "max-completion-tokens-zero",
        CHAT,
        _ok(max_completion_tokens=0),
        {},
        400,
        "max_completion_tokens",
    ),
    ("body-too-large", CHAT, _ok(pad="x" * 5000), {}, 413, None),
    (
        "deadline-not-numeric",
        CHAT,
        _ok(),
        {"x-request-deadline-ms": "soon"},
        400,
        "X-Request-Deadline-Ms",
    ),
    (
        "deadline-negative",
        CHAT,
        _ok(),
        {"x-request-deadline-ms": "-1"},
        400,
        "X-Request-Deadline-Ms",
    ),
    (
        "retry-count-garbage",
        CHAT,
        _ok(),
        {"x-stainless-retry-count": "two"},
        400,
        "x-stainless-retry-count",
    ),
    ("class-not-allowed", CHAT, _ok(), {"x-workload-class": "background"}, 400, "X-Workload-Class"),
    ("class-unknown", CHAT, _ok(), {"x-workload-class": "vip"}, 400, "X-Workload-Class"),
    ("request-id-too-long", CHAT, _ok(), {"x-request-id": "r" * 200}, 400, "X-Request-Id"),
]


def _assert_nothing_taken(h: Harness) -> None:
    stats = h.ctx.scheduler.stats()
    assert stats.in_flight == 0 and stats.queued == 0
    assert stats.charged_tokens == 0
    assert h.backend("a").requests == []


def _assert_openai_error(body: Any) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]


@pytest.mark.parametrize(
    ("path", "body", "headers", "status", "param"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
async def test_bad_input_is_refused_without_taking_anything(
    config,
    fleet: FakeFleet,
    path: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    param: str | None,
) -> None:
    async with in_process(config, fleet) as h:
        kwargs: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
        r = await h.client.post(path, headers={**auth(), **headers}, **kwargs)
        assert r.status_code == status, r.text
        _assert_openai_error(r.json())
        assert r.json()["error"]["param"] == param
        assert r.headers["x-request-id"]
        assert r.headers["x-sluicegate-decision"] == "reject"
        _assert_nothing_taken(h)


async def test_declared_oversized_body_is_refused_before_reading(config, fleet) -> None:
    async with in_process(config, fleet) as h:
        r = await h.client.post(CHAT, headers={**auth(), "content-length": "999999"}, content=b"{}")
        assert r.status_code == 413
        _assert_nothing_taken(h)


@pytest.mark.parametrize("authorization", [None, "Bearer sk-wrong", "Basic abc", "Bearer "])
async def test_missing_or_unknown_key_is_401(config, fleet, authorization: str | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    async with in_process(config, fleet) as h:
        r = await h.client.post(CHAT, headers=headers, json=_ok())
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
        _assert_nothing_taken(h)


async def test_anonymous_tenant_only_when_configured(fleet) -> None:
    config = make_config(auth={"anonymous_tenant": "beta"})
    async with in_process(config, fleet) as h:
        r = await h.client.post(CHAT, json=_ok())
        assert r.status_code == 200
        assert h.backend("a").requests


async def test_unknown_path_and_method_have_the_error_shape(config, fleet) -> None:
    async with in_process(config, fleet) as h:
        r = await h.client.get("/v1/nope", headers={"x-request-id": "lost-1"})
        assert r.status_code == 404
        _assert_openai_error(r.json())
        assert r.headers["x-request-id"] == "lost-1"
        assert r.headers["x-sluicegate-reason"] == "not_found"
        r = await h.client.get(CHAT)
        assert r.status_code == 405
        _assert_openai_error(r.json())


async def test_client_request_id_is_echoed_and_generated_when_absent(config, fleet) -> None:
    async with in_process(config, fleet) as h:
        r = await h.client.post(CHAT, headers={**auth(), "x-request-id": "abc-1"}, json=_ok())
        assert r.headers["x-request-id"] == "abc-1"
        r1 = await h.client.post(CHAT, headers=auth(), json=_ok())
        r2 = await h.client.post(CHAT, headers=auth(), json=_ok())
        assert r1.headers["x-request-id"] != r2.headers["x-request-id"]


def test_invalid_policy_section_fails_create_app_with_locations() -> None:
    from gateway.config.schema import ConfigError

    config = make_config(policy={"limit": {"type": "fixed", "max_in_flight": -1}})
    with pytest.raises(ConfigError) as info:
        create_app(config, background=False)
    assert any(issue.loc[:2] == ("policy", "limit") for issue in info.value.issues)
