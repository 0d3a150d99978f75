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
    # half a surrogate pair, escaped: valid JSON, but no UTF-8 can carry it
    (
        "lone-surrogate-content",
        CHAT,
        b'{"model": "tiny", "messages": [{"role": "user", "content": "a\\ud800"}]}',
        {},
        400,
        None,
    ),
    (
        "lone-surrogate-prompt",
        "/v1/completions",
        b'{"model": "tiny", "prompt": ["\\uDFFF"]}',
        {},
        400,
        None,
    ),
    (
        "lone-surrogate-key",
        CHAT,
        b'{"model": "tiny", "messages": [{"role": "user"}], "\\udc00": 1}',
        {},
        400,
        None,
    ),
    # what the gateway rewrites (stream_options, max_tokens, n) is validated, not overwritten
    (
        "stream-options-not-object",
        CHAT,
        _ok(stream=True, stream_options=[]),
        {},
        400,
        "stream_options",
    ),
    (
        "stream-options-string",
        CHAT,
        _ok(stream=True, stream_options="usage"),
        {},
        400,
        "stream_options",
    ),
    (
        "include-usage-string",
        CHAT,
        _ok(stream=True, stream_options={"include_usage": "yes"}),
        {},
        400,
        "stream_options.include_usage",
    ),
    (
        "include-usage-number",
        CHAT,
        _ok(stream=True, stream_options={"include_usage": 1}),
        {},
        400,
        "stream_options.include_usage",
    ),
    (
        "include-usage-object",
        CHAT,
        _ok(stream=True, stream_options={"include_usage": {}}),
        {},
        400,
        "stream_options.include_usage",
    ),
    (
        "max-tokens-invalid-beside-max-completion-tokens",
        CHAT,
        _ok(max_completion_tokens=10, max_tokens="x"),
        {},
        400,
        "max_tokens",
    ),
    (
        "max-tokens-over-limit-beside-max-completion-tokens",
        CHAT,
        _ok(max_completion_tokens=10, max_tokens=4096),
        {},
        400,
        "max_tokens",
    ),
    ("n-zero", CHAT, _ok(n=0), {}, 400, "n"),
    ("n-string", CHAT, _ok(n="2"), {}, 400, "n"),
    ("n-float", CHAT, _ok(n=2.0), {}, 400, "n"),
    ("n-bool", CHAT, _ok(n=True), {}, 400, "n"),
    (
        "best-of-below-n",
        "/v1/completions",
        {"model": "tiny", "prompt": "x", "n": 3, "best_of": 2},
        {},
        400,
        "best_of",
    ),
    (
        "best-of-string",
        "/v1/completions",
        {"model": "tiny", "prompt": "x", "best_of": "4"},
        {},
        400,
        "best_of",
    ),
    (
        "prompt-nested-strings",
        "/v1/completions",
        {"model": "tiny", "prompt": [["a"]]},
        {},
        400,
        "prompt",
    ),
    ("prompt-mixed", "/v1/completions", {"model": "tiny", "prompt": ["a", 1]}, {}, 400, "prompt"),
    (
        "prompt-empty-token-ids",
        "/v1/completions",
        {"model": "tiny", "prompt": [[1], []]},
        {},
        400,
        "prompt",
    ),
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


@pytest.mark.parametrize(
    "authorization",
    ["Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer ", "Bearer", "bearer   ", "garbage", "", "Token k"],
)
async def test_malformed_credentials_are_401_even_with_an_anonymous_tenant(
    fleet, authorization: str
) -> None:
    config = make_config(auth={"anonymous_tenant": "beta"})
    async with in_process(config, fleet) as h:
        r = await h.client.post(CHAT, headers={"authorization": authorization}, json=_ok())
        assert r.status_code == 401, r.text
        assert r.json()["error"]["type"] == "authentication_error"
        _assert_nothing_taken(h)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_surrogate_pair_escaped_in_halves_is_served(config, fleet, stream: bool) -> None:
    raw = b'{"model": "tiny", "stream": %s, "messages": [{"role": "user", ' + (
        b'"content": "\\ud83d\\ude00"}]}'  # an emoji, as ensure_ascii encoders write it
    )
    async with in_process(config, fleet) as h:
        r = await h.client.post(
            CHAT, headers=auth(), content=raw % (b"true" if stream else b"false")
        )
        assert r.status_code == 200, r.text
        assert h.backend("a").requests[-1]["messages"][0]["content"] == "\U0001f600"


@pytest.mark.parametrize("options", [None, {}, {"include_usage": None}, {"include_usage": False}])
async def test_valid_stream_options_still_get_usage_asked_and_stripped(
    config, fleet, options: Any
) -> None:
    async with in_process(config, fleet) as h:
        body = _ok(stream=True, **({} if options is None else {"stream_options": options}))
        r = await h.client.post(CHAT, headers=auth(), json=body)
        assert r.status_code == 200, r.text
        assert h.backend("a").requests[-1]["stream_options"]["include_usage"] is True
        assert '"usage"' not in r.text  # the client did not ask for it


async def test_a_degraded_completion_is_capped_in_the_field_the_backend_reads(fleet) -> None:
    """vLLM's completions read ``max_tokens`` only; a cap written elsewhere would not hold."""
    ladder = {"steps": [{"name": "cap", "at": 0.0, "action": "cap_max_tokens", "max_tokens": 2}]}
    async with in_process(make_config(policy={"ladder": ladder}), fleet) as h:
        body = {"model": "tiny", "prompt": "x", "max_completion_tokens": 100}
        r = await h.client.post("/v1/completions", headers=auth(), json=body)
        assert r.status_code == 200 and r.headers["x-sluicegate-degraded"] == "cap"
        assert h.backend("a").requests[-1]["max_tokens"] == 2


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
