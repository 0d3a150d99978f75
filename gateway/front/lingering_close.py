"""Lingering close, as nginx's ``lingering_close``: the end of a connection whose request
was answered before its body had all arrived (a 413 for a body over ``max_body_bytes``, a
401, a 408 for a body too slow, a 431 for a head too large).

Closing such a socket at once, with the rest of the body unread, makes the kernel answer
the client's next segment with a reset, and a client that writes its whole body before it
reads (Python's ``urllib``, many SDKs) gets ``BrokenPipeError`` or ``ECONNRESET`` instead of
the answer, which may already sit in its receive buffer. So instead the answer goes out
with ``connection: close``, the write side is shut (a FIN after the answer), and whatever
the client still sends is read and thrown away until it closes the connection; then the
socket closes with nothing unread. The drain is bounded, so a client that trickles its
body forever (a slowloris) still ends:

* ``time_s`` in all from the answer (nginx's ``lingering_time``, 30 s);
* ``idle_s`` without a byte from the client (nginx's ``lingering_timeout``, 5 s);
* ``max_bytes`` thrown away (nginx has no such bound; draining costs a read per chunk).

Past a bound the socket is closed as it is: the client has had its answer for that long.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class LingerBounds:
    time_s: float = 30.0
    idle_s: float = 5.0
    max_bytes: int = 16 * 2**20


class Lingering:
    """The drain of one connection whose answer has been written: shuts the write side now
    and closes the transport when the client closes, or at the first bound reached."""

    def __init__(
        self, transport: asyncio.Transport, bounds: LingerBounds, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.transport = transport
        self.bounds = bounds
        self.drained = 0
        """Bytes received and thrown away."""
        self._loop = loop
        self._total = loop.call_later(bounds.time_s, self.end)
        self._idle = loop.call_later(bounds.idle_s, self.end)
        if transport.can_write_eof():
            transport.write_eof()  # the answer, then a FIN: the client sees it whole

    def received(self, size: int) -> None:
        """``size`` more bytes of the body arrived (the caller throws them away)."""
        self.drained += size
        if self.drained > self.bounds.max_bytes:
            self.end()
            return
        self._idle.cancel()
        self._idle = self._loop.call_later(self.bounds.idle_s, self.end)

    def end(self) -> None:
        """Stop draining and close the socket (also what the timers call)."""
        self.stop()
        if not self.transport.is_closing():
            self.transport.close()

    def stop(self) -> None:
        """Cancel the timers (the connection is gone)."""
        self._total.cancel()
        self._idle.cancel()
