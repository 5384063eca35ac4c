"""Running the app: a socket, a server, signals and the order of shutdown.

``--backend asyncio`` serves with uvicorn, ``--backend trio`` with hypercorn's
trio worker; both get the same app and the same already-bound socket, and
neither installs signal handlers of its own: SIGTERM or SIGINT stops taking
connections and lets requests in flight finish within the grace period; a
second signal stops them at once. Either way every worker is then stopped
and its exit confirmed before the process exits.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Literal

import anyio
import attrs
from starlette.types import ASGIApp

from synapse_core import Host, HostConfig, PluginHost, open_host
from synapse_core.frontend import map_large_blocks

from .app import create_app
from .service import Service, preload
from .settings import ServeSettings

if TYPE_CHECKING:
    from .otel import OtelTracing

Backend = Literal["asyncio", "trio"]
log = logging.getLogger("synapse.http")
#: connections the kernel queues before the server accepts them
BACKLOG = 2048
#: how often a stopping server looks whether requests are still inside the app
IDLE_POLL_S = 0.05
#: the longest a thread running Python code keeps the GIL from the event loop
SWITCH_INTERVAL_S = 0.001


def backend_options(backend: Backend) -> dict[str, Any]:
    """``anyio.run``'s options for serving on ``backend``: on asyncio, uvloop's
    event loop where it is installed (every request is several passes of the
    loop, and uvloop's cost a fraction of the pure-Python loop's)."""
    if backend != "asyncio" or importlib.util.find_spec("uvloop") is None:
        return {}
    return {"use_uvloop": True}


@attrs.frozen
class Listening:
    """What a started server tells its caller."""

    url: str
    #: the catalog's models that can run here
    models: list[str]
    #: the catalog's models that cannot (their transport is missing or unavailable)
    unavailable: list[str]


class BindError(OSError):
    """The address cannot be bound (in use, not this machine's, not allowed)."""


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: a response written as head then body
    # must not wait for the client's delayed ACK (40 ms on Linux).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BindError(exc.errno, f"cannot bind {host}:{port}: {exc.strerror}") from None
    sock.listen(BACKLOG)
    sock.set_inheritable(False)
    return sock


async def serve(
    config: HostConfig,
    settings: ServeSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    backend: Backend = "asyncio",
    plugins: PluginHost | None = None,
    on_listening: Callable[[Listening], None] = lambda listening: None,
) -> None:
    """Serve until a signal; run with ``anyio.run(serve, ..., backend=backend)``.

    Signals are watched from before the host opens until it has closed, so a
    second one stops the workers at once whenever it comes, even while the
    host is retiring them after the grace period.
    """
    sock = bind(host, port)
    # Made before the host opens and shut down after it closed, so the last
    # requests' spans are exported before the process exits.
    tracing = None
    try:
        if settings.otlp_endpoint is not None:
            from .tracing import open_tracing

            tracing = open_tracing(settings.otlp_endpoint)
        await _serve(config, settings, sock, backend, tracing, plugins, on_listening)
    finally:
        sock.close()  # _serve's own close, unless it never ran
        if tracing is not None:
            tracing.shutdown()


async def _serve(
    config: HostConfig,
    settings: ServeSettings,
    sock: socket.socket,
    backend: Backend,
    tracing: OtelTracing | None,
    plugins: PluginHost | None,
    on_listening: Callable[[Listening], None],
) -> None:
    map_large_blocks()  # a large body's memory goes back once it is answered
    # After each system call the event loop takes the GIL back; while a
    # background thread runs Python code it waits for the switch interval
    # (5 ms by default) at every step of every request.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    stop, force = anyio.Event(), anyio.Event()
    opened: list[Host] = []
    with contextlib.ExitStack() as closing:
        closing.callback(sock.close)
        async with anyio.create_task_group() as signals:
            await signals.start(
                _watch_signals, stop, force, settings.drain_s, settings.shutdown_grace_s
            )
            signals.start_soon(_stop_now_when_forced, force, opened)
            async with open_host(config, plugins=plugins) as synapse_host:
                opened.append(synapse_host)
                await preload(synapse_host, settings.preload)
                app = create_app(synapse_host, settings, tracing=tracing)
                service: Service = app.state.synapse
                on_listening(_listening(sock, synapse_host))
                close = anyio.Event()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_drain, stop, force, close, service, settings.drain_s)
                    await run_app(
                        app,
                        sock,
                        backend,
                        settings,
                        close,
                        force,
                        lambda: service.metrics.inside,
                    )
                    tg.cancel_scope.cancel()
                log.info("stopped taking requests; %d answered", service.metrics.answered)
            # Leaving open_host retired every worker and confirmed its exit.
            signals.cancel_scope.cancel()


def _listening(sock: socket.socket, host: Host) -> Listening:
    bound = sock.getsockname()
    name = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    entries = host.catalog.entries.values()
    return Listening(
        f"http://{name}:{bound[1]}",
        [e.spec.name for e in entries if e.available],
        [e.spec.name for e in entries if not e.available],
    )


async def _watch_signals(
    stop: anyio.Event,
    force: anyio.Event,
    drain: float,
    grace: float,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            if not stop.is_set():
                log.warning(
                    "%s: stopping; /health answers 503 for %g s, then requests in flight "
                    "may finish within %g s (signal again to stop at once)",
                    signal.Signals(signum).name,
                    drain,
                    grace,
                )
                stop.set()
            else:
                log.warning("stopping at once")
                force.set()


async def _drain(
    stop: anyio.Event, force: anyio.Event, close: anyio.Event, service: Service, drain_s: float
) -> None:
    """Once stopping, ``/health`` answers 503 while the listener stays open
    for ``drain_s`` (a load balancer probing it takes the server out of its
    pool meanwhile, and requests still arriving are served), then ``close``."""
    await stop.wait()
    service.stopping = True  # /health says 503 from now on
    with anyio.move_on_after(drain_s):
        await force.wait()
    close.set()


async def _stop_now_when_forced(force: anyio.Event, opened: list[Host]) -> None:
    await force.wait()
    if opened:
        await stop_workers_now(opened[0])


async def stop_workers_now(host: Host) -> None:
    """Stop every worker without draining its calls, still confirming exits."""
    with anyio.CancelScope(shield=True):
        for supervisor in list(host.supervisors.values()):
            for worker in list(supervisor.workers.values()):
                await supervisor.stop_now(worker)


async def run_app(
    app: ASGIApp,
    sock: socket.socket,
    backend: Backend,
    settings: ServeSettings,
    stop: anyio.Event,
    force: anyio.Event,
    busy: Callable[[], int] = lambda: 0,
) -> None:
    """Serve ``app`` on the bound ``sock`` until ``stop``, then until no request
    is inside the app (``busy``) or ``settings.shutdown_grace_s`` seconds have
    passed, or until ``force``. The server's own wait for its connections is
    not relied on: a connection it closed at the wrong moment could hold it
    for the whole grace."""
    run = _uvicorn if backend == "asyncio" else _hypercorn
    grace = settings.shutdown_grace_s
    await run(app, sock, settings, stop, lambda end: _end(stop, force, grace, busy, end))


async def _end(
    stop: anyio.Event,
    force: anyio.Event,
    grace: float,
    busy: Callable[[], int],
    end: Callable[[], None],
) -> None:
    await stop.wait()
    with anyio.move_on_after(grace):
        while busy() and not force.is_set():
            await anyio.sleep(IDLE_POLL_S)
    end()


Ender = Callable[[Callable[[], None]], Coroutine[Any, Any, None]]


async def _uvicorn(
    app: ASGIApp, sock: socket.socket, settings: ServeSettings, stop: anyio.Event, ender: Ender
) -> None:
    import uvicorn

    from . import uvicorn_connection

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # signals are ours (see _watch_signals)

    config = uvicorn.Config(
        app,
        # The app is given an open host, so its lifespan does nothing; "on"
        # would leave uvicorn's lifespan task waiting for a shutdown message
        # that a forced exit never sends, and log its CancelledError traceback.
        lifespan="off",
        http=uvicorn_connection.protocol(settings.header_timeout_s),
        # Typed int, but used as asyncio.wait_for's timeout and call_later's
        # delay: a float works.
        timeout_graceful_shutdown=settings.shutdown_grace_s,  # type: ignore[arg-type]
        timeout_keep_alive=settings.keep_alive_s,  # type: ignore[arg-type]
        log_level="warning",
        access_log=False,
        # Nothing reads the client's address or scheme, so rewriting them from
        # X-Forwarded-* headers (uvicorn's default) would cost every request for nothing.
        proxy_headers=False,
    )
    server = Server(config)

    async def relay() -> None:
        await stop.wait()
        server.should_exit = True  # stop accepting

    def end() -> None:
        server.force_exit = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(relay)
        tg.start_soon(ender, end)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()


async def _hypercorn(
    app: ASGIApp, sock: socket.socket, settings: ServeSettings, stop: anyio.Event, ender: Ender
) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from . import trio_connection, uvicorn_connection

    trio_connection.install()
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.graceful_timeout = settings.shutdown_grace_s
    # One timer: a connection with no request begun (a new one, one between
    # requests, or one whose request head is still arriving) is closed after
    # it. Its read_timeout is left unset: it would cut off a client that
    # waits quietly for a long answer.
    config.keep_alive_timeout = min(settings.keep_alive_s, settings.header_timeout_s)
    # the same bound on a request head as on asyncio (431 past it)
    config.h11_max_incomplete_size = uvicorn_connection.MAX_HEAD_BYTES
    config.accesslog = None
    config.errorlog = quiet = logging.getLogger("synapse.http.hypercorn")
    quiet.setLevel(logging.WARNING)  # we print the URL ourselves
    config.backlog = BACKLOG
    # Hypercorn takes the descriptor over and closes it; ours must not.
    sock.detach()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ender, lambda: tg.cancel_scope.cancel())
        await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
        tg.cancel_scope.cancel()
