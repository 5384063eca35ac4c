"""Uvicorn's HTTP/1.1 connection, with a bound on waiting for a request.

Uvicorn's ``timeout_keep_alive`` closes a connection that stays silent after
an answer, but nothing closes one that never sends a byte, or one that sends
a request head a byte at a time: each would hold a file descriptor for as
long as its client likes. Here a new connection gets the same keep-alive
bound before its first byte, and once a request head has begun to arrive it
must be complete within the header timeout (what hypercorn bounds with its
``keep_alive_timeout``, and nginx with ``client_header_timeout``).
"""

from __future__ import annotations

import asyncio
from typing import Any


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

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._answering():
                self._stop_head_timer()
            elif self._head_timer is None and not self.transport.is_closing():
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
