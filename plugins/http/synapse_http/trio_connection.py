"""Hypercorn's trio connection, without its shutdown race.

When shutdown starts, hypercorn closes every idle keep-alive connection from
a separate task. A request that the connection's reader has already taken off
the socket is still run after that close: the app sees the client "go away"
and its answer goes to a closed socket, so a request the server read is never
answered. Here an idle connection is closed only while no request has begun
on it, and bytes read after the close are dropped before they reach the app
(never accepted, as for a request sent on a connection already closed). A
connection with a request under way is left to answer it; hypercorn then
closes it after the response, as it does for every connection once stopping.

Its HTTP/1.1 protocol (:class:`Strict`) also refuses, as uvicorn does, with
400 and a closed connection: a request with both ``Content-Length`` and
``Transfer-Encoding`` (the two framings disagree; a proxy in front may read
it the other way: request smuggling), and HTTP/2's preface (``PRI *
HTTP/2.0``), which hypercorn would otherwise take as the start of an HTTP/2
connection that the server then waits on until its timeout. Synapse serves
HTTP/1.1.
"""

from __future__ import annotations

import h11
from hypercorn.events import Closed, Event, RawData
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

ANSWERING = (h11.SEND_RESPONSE, h11.SEND_BODY)


class Connection(TCPServer):
    async def _initiate_server_close(self) -> None:
        if _request_begun(self):
            return
        handle = self.protocol.handle

        async def closed(event: Event) -> None:
            if not isinstance(event, RawData):
                await handle(event)

        setattr(self.protocol, "handle", closed)  # noqa: B010 (an instance's bound method)
        await super()._initiate_server_close()


class _Refused(Exception):
    """A request head :class:`Strict` answers 400 without serving it."""


class Strict(H11Protocol):
    """Hypercorn's HTTP/1.1 protocol, refusing ambiguous framing and HTTP/2."""

    async def _check_protocol(self, event: h11.Request) -> None:
        if event.method == b"PRI" and event.target == b"*":
            raise _Refused
        names = {name.lower() for name, _ in event.headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            raise _Refused
        await super()._check_protocol(event)

    async def handle(self, event: Event) -> None:
        try:
            await super().handle(event)
        except _Refused:
            await self._send_error_response(400)
            await self.send(Closed())


def _request_begun(connection: TCPServer) -> bool:
    protocol = connection.protocol.protocol
    # The reader parses a request head before its first await; from then on
    # the server side is answering it until the response ends.
    return isinstance(protocol, H11Protocol) and protocol.connection.our_state in ANSWERING


def install() -> None:
    """Serve hypercorn's trio worker with :class:`Connection` and :class:`Strict`."""
    import hypercorn.protocol
    import hypercorn.trio.run

    hypercorn.trio.run.TCPServer = Connection  # type: ignore[attr-defined]
    hypercorn.protocol.H11Protocol = Strict  # type: ignore[attr-defined]
