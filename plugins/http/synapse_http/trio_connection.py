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
"""

from __future__ import annotations

import h11
from hypercorn.events import Event, RawData
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


def _request_begun(connection: TCPServer) -> bool:
    protocol = connection.protocol.protocol
    # The reader parses a request head before its first await; from then on
    # the server side is answering it until the response ends.
    return isinstance(protocol, H11Protocol) and protocol.connection.our_state in ANSWERING


def install() -> None:
    """Serve hypercorn's trio worker with :class:`Connection`."""
    import hypercorn.trio.run

    hypercorn.trio.run.TCPServer = Connection  # type: ignore[attr-defined]
