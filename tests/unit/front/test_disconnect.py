"""``DisconnectWatch`` fires, fails and stops as the listener Task it replaces did.

``receive`` here waits on an ``asyncio.Event`` between messages, as uvicorn's does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.front.disconnect import DisconnectWatch


class Client:
    """An ASGI ``receive`` fed by the test; each call waits for the next message."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.messages: list[dict[str, Any]] = []
        self.exited = 0

    def push(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.event.set()

    async def receive(self) -> dict[str, Any]:
        try:
            while not self.messages:
                await self.event.wait()
                self.event.clear()
            return self.messages.pop(0)
        finally:
            self.exited += 1


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_gone_when_the_client_disconnects_not_before() -> None:
    client = Client()
    watch = DisconnectWatch(client.receive)
    await _turns()
    assert not watch.gone.done()
    client.push({"type": "http.request", "body": b"", "more_body": False})  # not a disconnect
    await _turns()
    assert not watch.gone.done()
    client.push({"type": "http.disconnect"})
    await asyncio.wait_for(watch.gone, 1.0)
    assert watch.gone.result() is None
    watch.close()  # after it fired: nothing to stop, the result stands
    assert not watch.gone.cancelled()


async def test_disconnect_already_there_fires_at_once() -> None:
    client = Client()
    client.push({"type": "http.disconnect"})
    watch = DisconnectWatch(client.receive)
    assert watch.gone.done()


async def test_close_stops_listening_and_runs_receives_cleanup() -> None:
    client = Client()
    watch = DisconnectWatch(client.receive)
    await _turns()
    assert len(client.event._waiters) == 1  # type: ignore[attr-defined]
    watch.close()
    assert watch.gone.cancelled()
    assert client.exited == 1 and not client.event._waiters  # type: ignore[attr-defined]
    client.push({"type": "http.disconnect"})  # too late: nobody is listening
    await _turns()
    assert client.messages == [{"type": "http.disconnect"}]


async def test_a_failing_receive_ends_the_watch_with_its_error() -> None:
    event = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await event.wait()
        raise OSError("socket gone")

    watch = DisconnectWatch(receive)
    event.set()
    with pytest.raises(OSError, match="socket gone"):
        await asyncio.wait_for(watch.gone, 1.0)


async def test_bare_yields_in_receive_are_stepped_over() -> None:
    async def receive() -> dict[str, Any]:
        for _ in range(3):
            await asyncio.sleep(0)
        return {"type": "http.disconnect"}

    watch = DisconnectWatch(receive)
    assert not watch.gone.done()
    await asyncio.wait_for(watch.gone, 1.0)
