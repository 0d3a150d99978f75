"""An ASGI streaming response that notices a client disconnect at once.

Starlette's ``StreamingResponse`` on ASGI 2.4 servers only learns of a disconnect when a
write fails, which can be many seconds into a silent upstream. Here a listener races the
stream; a disconnect cancels it and closes the generator, so its ``finally`` (which
releases the slot and closes the upstream) runs within one event-loop turn.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncGenerator, Awaitable, Mapping
from typing import Any, TypeVar

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger("sluicegate.relay")
T = TypeVar("T")


class RelayResponse(Response):
    media_type = "text/event-stream"

    def __init__(
        self,
        chunks: AsyncGenerator[bytes, None],
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.chunks = chunks
        self.status_code = status_code
        self.background = None
        base = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        self.init_headers({**base, **(headers or {})})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stream = asyncio.ensure_future(self._stream(send))
        listen = asyncio.ensure_future(wait_disconnect(receive))
        try:
            await asyncio.wait({stream, listen}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (stream, listen):
                task.cancel()
            await asyncio.gather(stream, listen, return_exceptions=True)
            await self.chunks.aclose()
        exc = None if stream.cancelled() else stream.exception()
        if exc is not None and not isinstance(exc, OSError):
            log.error("relay failed", exc_info=exc)

    async def _stream(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async for chunk in self.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client has gone (the request body must already be consumed)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def race(work: Awaitable[T], gone: asyncio.Future[Any]) -> tuple[bool, T | None]:
    """Run ``work`` unless ``gone`` fires first: (True, result) or (False, None) once the
    work has been cancelled. Exceptions of ``work`` propagate.

    ``work`` runs in the calling task (no task, no ``asyncio.wait`` per call: this is on
    every request's path twice); ``gone`` firing cancels the caller's task, and that one
    cancellation is taken back here (``uncancel``), so a cancellation from anyone else
    still propagates."""
    if gone.done():
        if inspect.iscoroutine(work):
            work.close()
        return False, None
    task = asyncio.current_task()
    assert task is not None
    armed, fired = True, False

    def cut(_: asyncio.Future[Any]) -> None:
        nonlocal fired
        if armed:  # a callback already scheduled may run after ``work`` finished
            fired = True
            task.cancel()

    gone.add_done_callback(cut)
    try:
        result = await work
    except asyncio.CancelledError:
        if fired and task.uncancel() == 0:
            return False, None
        raise
    finally:
        armed = False
        gone.remove_done_callback(cut)
    if fired:  # ``work`` swallowed the cancellation and finished: its result stands
        task.uncancel()
    return True, result
