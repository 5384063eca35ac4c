"""The benchmark's HTTP server: ``python -m benchmarks.http_server CATALOG [--cpu]``.

The Synapse app, served as ``synapse serve --backend asyncio`` serves it
(uvicorn, the same socket handling), with one more route beside it:
``POST /floor`` answers at once with a fixed vector of the model's size, in
the same JSON shape as ``/embed``, without touching the host. Its requests/s
is the ceiling the HTTP stack and the load generator allow on this machine.
With ``--cpu`` the catalog's models run on synapse-cpu's transport instead
of the mock one. Prints ``serving on URL`` on stderr; stops on SIGTERM.
"""

from __future__ import annotations

import signal
import socket
import sys

import anyio
import attrs
import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

from synapse_core.config import HostConfig
from synapse_core.opening import open_host
from synapse_core.testing import transport_plugin
from synapse_http.app import create_app
from synapse_http.server import backend_options, bind, run_app
from synapse_http.settings import ServeSettings
from synapse_mock_transport.transport import MockTransport

from .rig import DIMS

FLOOR = msgspec.json.encode([[0.125] * DIMS])
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(FLOOR)).encode())]


def plugins(cpu: bool) -> list[object]:
    if cpu:
        import synapse_cpu.plugin

        return [synapse_cpu.plugin]
    return [transport_plugin(MockTransport())]


async def main(catalog: str, cpu: bool) -> None:
    # Coalescing on, as ``synapse serve`` has it unless told --no-coalesce.
    config = attrs.evolve(HostConfig.from_toml(catalog), coalesce=True)
    sock = bind("127.0.0.1", 0)
    async with open_host(config, plugins=plugins(cpu)) as host:
        synapse = create_app(host)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"] == "/floor":
                while (await receive()).get("more_body"):
                    pass
                await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
                await send({"type": "http.response.body", "body": FLOOR})
                return
            await synapse(scope, receive, send)

        await serve_until_signal(app, sock)


async def serve_until_signal(app: ASGIApp, sock: socket.socket) -> None:
    """Serve ``app`` with uvicorn as ``synapse serve`` does, until SIGTERM or SIGINT."""
    stop, force = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:

        async def on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    stop.set()

        tg.start_soon(on_signal)
        port = sock.getsockname()[1]
        print(f"serving on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
        await run_app(app, sock, "asyncio", ServeSettings(shutdown_grace_s=1.0), stop, force)
        tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(
        main, sys.argv[1], "--cpu" in sys.argv[2:], backend_options=backend_options("asyncio")
    )
