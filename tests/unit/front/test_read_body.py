"""``read_body`` reads the ASGI body messages as ``Request.stream`` would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

from gateway.front.completions import read_body
from gateway.request.errors import ApiError


def _request(*messages: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers or []}
    return Request(scope, receive)


def _body(data: bytes, more: bool) -> dict[str, Any]:
    return {"type": "http.request", "body": data, "more_body": more}


async def test_body_in_pieces_is_joined_as_starlette_joins_it() -> None:
    pieces = [_body(b'{"a":', True), {"type": "http.other"}, _body(b"", True), _body(b"1}", False)]
    assert await read_body(_request(*pieces), 100) == b'{"a":1}'
    assert await _request(*pieces).body() == b'{"a":1}'


async def test_one_message_and_a_message_without_body_key() -> None:
    assert await read_body(_request(_body(b"{}", False)), 100) == b"{}"
    assert await read_body(_request({"type": "http.request"}), 100) == b""


async def test_body_past_the_limit_is_refused_while_reading() -> None:
    with pytest.raises(ApiError) as err:
        await read_body(_request(_body(b"x" * 60, True), _body(b"x" * 60, False)), 100)
    assert err.value.status == 413


async def test_disconnect_while_reading_is_a_400_for_an_incomplete_body() -> None:
    with pytest.raises(ApiError) as err:
        await read_body(_request(_body(b"{", True), {"type": "http.disconnect"}), 100)
    assert err.value.status == 400 and err.value.reason == "body_incomplete"


async def test_a_body_that_stops_coming_is_a_408_after_the_timeout() -> None:
    never = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if not never.is_set():
            never.set()
            return _body(b'{"a":', True)
        await asyncio.Event().wait()  # the client sends nothing more
        raise AssertionError("unreachable")

    request = Request({"type": "http", "method": "POST", "path": "/", "headers": []}, receive)
    with pytest.raises(ApiError) as err:
        await read_body(request, 100, timeout_s=0.01)
    assert err.value.status == 408 and err.value.reason == "body_timeout"
