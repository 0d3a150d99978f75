"""The check after every fault of the fault tier (``test_faults.py``, and the tests it
lists that cover a fault already), and the ways a client's answer is read.

``after_fault`` asserts, once the fault is over:
* every client got exactly one terminal answer (a status with a whole body; for a
  stream, exactly one of ``data: [DONE]`` or an error event, and nothing after it);
* the gateway's in-flight and queued gauges are back to 0 (read from its /metrics);
* every engine's running count is back to 0 (read from its own /metrics);
* nothing was logged at ERROR level (a client's fault, a backend's fault: no traceback).
``serve_gateway`` adds, at its exit, one counted outcome per completion request sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tests.integration.harness import Gateway, engine_running, wait_for

LONG = 4000
"""Output tokens of a request held open through a fault: far longer than any test waits."""


@dataclass(frozen=True)
class Answer:
    """What one client got. ``terminals`` counts terminal answers: a status line with a
    whole body (1), or, for a 200 stream, its ``[DONE]`` and error events."""

    status: int
    terminals: int
    last: str = ""
    """A stream's last event (``[DONE]`` or the error's JSON), or the body."""

    @property
    def error_event(self) -> bool:
        return self.status == 200 and '"error"' in self.last


async def stream_answer(client: httpx.AsyncClient, body: dict[str, Any]) -> Answer:
    """POST a streamed chat completion and read it to the end."""
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            return Answer(r.status_code, 1, (await r.aread()).decode())
        return await read_events(r.aiter_lines())


async def read_events(lines: AsyncIterator[str], events: list[str] | None = None) -> Answer:
    """The rest of an open 200 stream's lines; ``events`` has the data lines seen so far
    (and collects the rest)."""
    seen = events if events is not None else []
    async for line in lines:
        if line.startswith("data: "):
            seen.append(line[len("data: ") :])
    return events_answer(seen)


def events_answer(events: Sequence[str]) -> Answer:
    """A 200 stream's answer from its data lines (without the ``data: `` prefix)."""
    terminals = 0  # terminal events, and any event after the first of them
    for data in events:
        if terminals or data == "[DONE]" or "error" in _json(data):
            terminals += 1
    return Answer(200, terminals, events[-1] if events else "")


async def post_answer(client: httpx.AsyncClient, body: dict[str, Any] | bytes) -> Answer:
    kw: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = await client.post("/v1/chat/completions", **kw)
    return Answer(r.status_code, 1, r.text)


async def raw_answer(port: int, parts: Sequence[bytes], ceiling_s: float = 30.0) -> Answer:
    """Write ``parts`` on a raw connection, then read until the server closes it: the
    status of what came back (0 for nothing) and how many responses (status lines)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for part in parts:
            writer.write(part)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), ceiling_s)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    responses = data.count(b"HTTP/1.1 ")
    status = int(data.split(b" ", 2)[1]) if responses else 0
    return Answer(status, responses, data.partition(b"\r\n\r\n")[2].decode("latin-1"))


def _json(data: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class ErrorLog(logging.Handler):
    """Collects records at ERROR and above from the gateway's and uvicorn's loggers."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def error_log() -> Iterator[ErrorLog]:
    handler = ErrorLog()
    loggers = [logging.getLogger(n) for n in ("", "uvicorn")]  # uvicorn's do not propagate
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


async def after_fault(
    gw: Gateway,
    answers: Sequence[Answer],
    engines: Sequence[str],
    errors: ErrorLog | None,
    expected_errors: Sequence[str] = (),
) -> None:
    """The shared check (see the module doc). ``engines``: URLs of the engines still
    running (a killed one has no count to read). ``expected_errors``: the start of the
    messages an operator must see at ERROR (an invalid reload), never with a traceback."""
    for answer in answers:
        assert answer.terminals == 1, f"not exactly one terminal answer: {answer}"

    async def drained() -> bool:
        m = await gw.metrics()
        return m.get("sluicegate_in_flight", -1.0) == 0 and m.get("sluicegate_queue_depth") == 0

    await wait_for(drained, what="gateway in-flight and queued gauges at 0")
    for url in engines:
        await wait_for(lambda u=url: _engine_idle(u), what=f"{url} running count at 0")
    if errors is not None:
        expected = tuple(expected_errors)
        logged = [
            f"{r.name}: {r.getMessage()}"
            for r in errors.records
            if r.exc_info or not r.getMessage().startswith(expected)
        ]
        assert not logged, f"logged as errors: {logged}"


async def _engine_idle(url: str) -> bool:
    return await engine_running(url) == 0
