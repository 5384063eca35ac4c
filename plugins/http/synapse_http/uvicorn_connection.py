"""Uvicorn's HTTP/1.1 connection, with a bound on waiting for a request.

Uvicorn's ``timeout_keep_alive`` closes a connection that stays silent after
an answer, but nothing closes one that never sends a byte, or one that sends
a request head a byte at a time: each would hold a file descriptor for as
long as its client likes. Here a new connection gets the same keep-alive
bound before its first byte, and once a request head has begun to arrive it
must be complete within the header timeout (what hypercorn bounds with its
``keep_alive_timeout``, and nginx with ``client_header_timeout``). And a
request head may take at most :data:`MAX_HEAD_BYTES` (431 past it), as on
hypercorn: httptools itself takes headers of any size.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

#: the most bytes a request head (request line and headers) may take: past
#: it the answer is 431 and the connection is closed. Hypercorn's bound (its
#: ``h11_max_incomplete_size``), given to both backends, so they agree.
MAX_HEAD_BYTES = 16 * 1024
_TOO_LARGE = json.dumps(
    {
        "error": f"the request head is over {MAX_HEAD_BYTES} bytes; send shorter headers",
        "error_type": "header-too-large",
    }
).encode()
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TOO_LARGE), _TOO_LARGE)
)


def protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``: uvicorn's own
    (httptools where installed, else h11) with the bounds above."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # pragma: no cover - httptools ships with uvicorn[standard]
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    class Bounded(Base):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            # As after an answer: closed if nothing arrives within keep-alive.
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

        _head_bytes = 0

        def data_received(self, data: bytes) -> None:
            if not self._answering():
                # bytes of a head not complete yet (and maybe of its body, if
                # the head completes in this chunk: then the count is reset)
                self._head_bytes += len(data)
            super().data_received(data)
            if self._answering():
                self._head_bytes = 0
                self._stop_head_timer()
            elif self.transport.is_closing():
                return
            elif self._head_bytes > MAX_HEAD_BYTES:
                # httptools has no bound of its own: it would take headers
                # for as long as they come (and uvicorn would keep them)
                self._stop_head_timer()
                self.transport.write(TOO_LARGE)
                self.transport.close()
            elif self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_timed_out)

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def _answering(self) -> bool:
            """A request's head has been read and its answer is not complete."""
            cycle = self.cycle
            return cycle is not None and not cycle.response_complete

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if not self._answering() and not self.transport.is_closing():
                self.transport.close()

    return Bounded
