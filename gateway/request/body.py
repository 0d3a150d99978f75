"""The request body: whole, at most ``max_body_bytes``, within ``body_timeout_s``.

Every front reads it here, piece by piece from its own protocol (ASGI ``receive``, the
ext_proc stream), so every front refuses alike: 413 past the size cap (before reading when
the declared length says so), 408 when the body does not come in time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.request.errors import ApiError

NextPiece = Callable[[], Awaitable[tuple[bytes, bool]]]
"""The next piece of the body and whether more follows; raises what ends the read early
(the HTTP front: ``incomplete``, when the client went away)."""


async def read_body(
    next_piece: NextPiece, limit: int, timeout_s: float | None, declared: str | None = None
) -> bytes:
    """The whole body, at most ``limit`` bytes (``declared``: the Content-Length, checked
    before reading), whole within ``timeout_s`` seconds. One piece, the usual case, is
    returned as it came."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    try:
        async with asyncio.timeout(timeout_s):
            return await _collect(next_piece, limit)
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body was not received within {timeout_s:g} s",
            code="request_timeout",
            reason="body_timeout",
        ) from None


async def _collect(next_piece: NextPiece, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk, more = await next_piece()
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        if not more:
            if not chunks:
                return bytes(chunk)
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def too_large(limit: int) -> ApiError:
    return ApiError(
        413,
        f"request body exceeds {limit} bytes",
        code="request_too_large",
        reason="body_too_large",
    )


def incomplete() -> ApiError:
    """The sender went away before its body was whole: its own fault (400), not an error
    of the gateway; nobody reads the answer, the record keeps it."""
    return ApiError(
        400,
        "the request body ended before it was complete",
        code="incomplete_body",
        reason="body_incomplete",
    )
