"""The body sent upstream: the client's bytes when nothing changes, re-encoded otherwise."""

from __future__ import annotations

import json

from gateway.forward.upstream import upstream_body

RAW = b'{ "model": "m",  "messages": [{"role": "user", "content": "hi"}], "max_tokens": 32 }'
BODY = json.loads(RAW)


def test_unchanged_non_streamed_body_goes_as_sent() -> None:
    assert upstream_body(BODY, model="m", max_tokens=32, stream=False, raw=RAW) is RAW
    assert upstream_body(BODY, model="m", max_tokens=None, stream=False, raw=RAW) is RAW


def test_a_degraded_model_or_max_tokens_is_written_into_the_body() -> None:
    smaller = json.loads(upstream_body(BODY, model="small", max_tokens=32, stream=False, raw=RAW))
    assert smaller == {**BODY, "model": "small"}
    capped = json.loads(upstream_body(BODY, model="m", max_tokens=8, stream=False, raw=RAW))
    assert capped == {**BODY, "max_tokens": 8}


def test_a_max_tokens_the_client_did_not_send_is_added() -> None:
    raw = b'{"model": "m", "messages": []}'
    out = json.loads(
        upstream_body(json.loads(raw), model="m", max_tokens=16, stream=False, raw=raw)
    )
    assert out["max_tokens"] == 16


def test_a_stream_always_asks_for_usage() -> None:
    body = {**BODY, "stream": True}
    raw = json.dumps(body).encode()
    out = json.loads(upstream_body(body, model="m", max_tokens=32, stream=True, raw=raw))
    assert out["stream_options"] == {"include_usage": True}
