"""``DisconnectWatch``: a future that is done once the client has gone, without a Task.

Every completion request listens for the client's disconnect while it is queued and while
the backend works (``relay.race``). A Task per request for that listener costs about as
much as the rest of the ASGI layer's bookkeeping (creating and registering it, copying the
context, then cancelling it: an exception thrown through three frames). The listener only
ever waits on one future at a time, so this drives ``wait_disconnect(receive)`` by hand:
one ``send`` now, one more each time the future it waits on is done. ``close`` stops it
(``coroutine.close()``: the ``finally`` blocks of ``receive`` run, as on a cancel).

Differences from a Task, none of which ``receive`` of an ASGI server relies on: the steps
after the first run outside any task (``asyncio.current_task()`` is None there), and
``close`` throws ``GeneratorExit`` rather than ``CancelledError`` into ``receive``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from starlette.types import Receive

from gateway.forward.streaming_response import wait_disconnect


class DisconnectWatch:
    """``gone`` is done when ``receive`` says ``http.disconnect`` (it carries the error
    when ``receive`` fails); ``close`` stops listening and cancels ``gone`` if pending.
    Start it after the request body has been read."""

    __slots__ = ("_coro", "_loop", "_waiting", "gone")

    def __init__(self, receive: Receive) -> None:
        self._loop = asyncio.get_running_loop()
        self.gone: asyncio.Future[None] = self._loop.create_future()
        self._coro: Coroutine[Any, Any, None] | None = wait_disconnect(receive)
        self._waiting: asyncio.Future[Any] | None = None
        self._step()

    def _step(self, _done: object = None) -> None:
        coro = self._coro
        if coro is None:
            return
        self._waiting = None
        try:
            yielded = coro.send(None)
        except StopIteration:
            self._end(None)
            return
        except (Exception, asyncio.CancelledError) as exc:
            self._end(exc)
            return
        if yielded is None:  # a bare yield (``sleep(0)``): go on at the next turn
            self._loop.call_soon(self._step)
        elif asyncio.isfuture(yielded) and getattr(yielded, "_asyncio_future_blocking", False):
            yielded._asyncio_future_blocking = False
            self._waiting = yielded
            yielded.add_done_callback(self._step)
        else:
            coro.close()
            self._end(RuntimeError(f"receive() yielded {yielded!r}, not a future"))

    def _end(self, error: BaseException | None) -> None:
        self._coro = None
        if self.gone.done():
            return
        if isinstance(error, asyncio.CancelledError):
            self.gone.cancel()
        elif error is not None:
            self.gone.set_exception(error)
        else:
            self.gone.set_result(None)

    def close(self) -> None:
        coro, self._coro = self._coro, None
        if coro is not None:
            waiting, self._waiting = self._waiting, None
            if waiting is not None:
                waiting.remove_done_callback(self._step)
            coro.close()
        self.gone.cancel()
