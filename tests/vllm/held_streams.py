"""Streaming requests held open in the background until the test lets them go.

The real-vLLM tier needs load it controls: more long streams than the server has batch
slots (so vLLM itself reports ``num_requests_waiting``), or exactly as many as its own
queue cap. ``HeldStreams`` opens them on an event loop of its own thread and, on
``stop()``, cancels every one: the connection closes and vLLM aborts the request, so no
load outlives the test. A stream that ends by itself is counted in ``completed``; with
``repeat`` it is opened again at once, so the load stays as it was for as long as it is held
(however long the test's steps take on a loaded machine).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

STOP_TIMEOUT_S = 30.0


class HeldStreams:
    """``count`` identical streaming POSTs to ``url``, open until ``stop()`` (idempotent);
    with ``repeat`` each is sent again whenever it completes."""

    def __init__(
        self,
        url: str,
        body: Mapping[str, Any],
        count: int,
        headers: Mapping[str, str] | None = None,
        *,
        repeat: bool = False,
    ) -> None:
        self.url, self.body, self.count, self.repeat = url, dict(body), count, repeat
        self.headers = dict(headers or {})
        self.completed = 0
        self.errors: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._tasks: list[asyncio.Task[None]] = []
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="held-streams", daemon=True)

    def __enter__(self) -> HeldStreams:
        self._thread.start()
        if not self._started.wait(STOP_TIMEOUT_S):
            raise RuntimeError("held streams did not start")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def open(self) -> int:
        """Streams neither completed nor cancelled yet."""
        return sum(1 for task in self._tasks if not task.done())

    def stop(self) -> None:
        """Cancel every stream (vLLM aborts them), then end the loop and its thread."""
        if self._thread.is_alive():
            for task in list(self._tasks):
                self._loop.call_soon_threadsafe(task.cancel)
            self._thread.join(STOP_TIMEOUT_S)
            if self._thread.is_alive():
                raise RuntimeError("held streams did not stop")
        if not self._loop.is_closed():
            self._loop.close()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # reported through .errors, never raised in the thread
            self.errors.append(repr(exc))
        finally:
            self._started.set()

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=self.count)
        timeout = httpx.Timeout(STOP_TIMEOUT_S * 10, connect=10.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            self._tasks = [asyncio.create_task(self._one(client)) for _ in range(self.count)]
            self._started.set()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _one(self, client: httpx.AsyncClient) -> None:
        try:
            while True:
                async with client.stream(
                    "POST", self.url, json=self.body, headers=self.headers
                ) as response:
                    if response.status_code != 200:
                        self.errors.append(f"status {response.status_code}")
                    async for _ in response.aiter_raw():
                        pass
                self.completed += 1
                if not self.repeat or self.errors:
                    return
        except httpx.HTTPError as exc:
            self.errors.append(repr(exc))
