"""``synapse serve``'s cost: one request against the in-process call, and
throughput against a bare ASGI endpoint on the same server.

The server (:mod:`benchmarks.http_server`, uvicorn as ``synapse serve`` runs
it) is a separate process with its own mock worker; the load generator runs
here. Both share this machine's cores with the worker, so the client's own
CPU time per request is measured and reported beside the figures: the floor
endpoint is driven by the same client, so its cost is in both sides of the
throughput ratio. The load generator speaks HTTP/1.1 over kept-alive
connections with pre-encoded requests, so that it costs as little as it can:
one request at a time from a blocking socket (the least a client can add to
a request's time), many at once from an event loop. The single request's p50
from the event loop's client is reported beside it
(``http_p50_from_event_loop_us``): on this kind of machine that client's own
wake-up adds about 100 µs, which is the client's and not the server's.
"""

from __future__ import annotations

import contextlib
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import anyio.abc

from synapse_core.opening import open_host
from synapse_core.testing import catalog_toml

from . import rig
from .harness import Figure, Mode, Series, Target, now_ns, rotating_p50

CONNECTIONS = 32
_LENGTH = re.compile(rb"content-length: *(\d+)", re.IGNORECASE)
_URL = re.compile(r"serving on http://127\.0\.0\.1:(\d+)")


def post(path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


EMBED = post("/embed", b'{"inputs": "' + rig.SHORT_TEXT.encode() + b'"}')
FLOOR = post("/floor", b'{"inputs": "' + rig.SHORT_TEXT.encode() + b'"}')


def split_answer(buffer: bytes) -> tuple[bytes, bytes] | None:
    """The body of the first whole answer in ``buffer`` and what follows it,
    or None while it is incomplete; an answer other than 200 raises."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end]
    if head[9:12] != b"200":
        raise RuntimeError(f"benchmark request failed: {buffer[:400]!r}")
    match = _LENGTH.search(head)
    assert match is not None, head
    stop = end + 4 + int(match[1])
    if len(buffer) < stop:
        return None
    return buffer[end + 4 : stop], buffer[stop:]


class Connection:
    """One kept-alive connection of the load generator; answers must be 200."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(await anyio.connect_tcp("127.0.0.1", port))

    async def request(self, raw: bytes) -> bytes:
        await self.stream.send(raw)
        buffer = self.buffer
        while (answer := split_answer(buffer)) is None:
            buffer += await self.stream.receive()
        body, self.buffer = answer
        return body

    async def aclose(self) -> None:
        await self.stream.aclose()


class BlockingConnection:
    """A kept-alive connection read with blocking calls, for one request at a
    time: the least a client can add to a request's time (no event loop
    wakes for the answer; the thread sleeps in ``recv`` until it is here)."""

    def __init__(self, port: int) -> None:
        self.socket = socket.create_connection(("127.0.0.1", port))
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def request(self, raw: bytes) -> bytes:
        self.socket.sendall(raw)
        buffer = self.buffer
        while (answer := split_answer(buffer)) is None:
            data = self.socket.recv(65536)
            if not data:
                raise RuntimeError("the benchmark server closed the connection")
            buffer += data
        body, self.buffer = answer
        return body

    def close(self) -> None:
        self.socket.close()


@contextlib.contextmanager
def running(*args: str) -> Iterator[int]:
    """Start ``python -m ARGS`` (a server that prints ``serving on URL`` on
    stderr) and yield its port; stop it with SIGTERM on the way out."""
    server = subprocess.Popen(
        [sys.executable, "-m", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stderr is not None
        for line in server.stderr:
            if match := _URL.search(line):
                yield int(match[1])
                break
        else:
            raise RuntimeError(f"the benchmark server {args[0]} did not start")
    finally:
        server.terminate()
        server.wait(60)


def measure(mode: Mode) -> list[Figure]:
    with tempfile.TemporaryDirectory() as folder:
        catalog = Path(folder) / "catalog.toml"
        catalog.write_text(catalog_toml(rig.model()), encoding="utf-8")
        with running("benchmarks.http_server", str(catalog)) as port:
            series: Series = anyio.run(_measure, mode, port)
    parts = series.medians(
        "http_p50_us",
        "http_p99_us",
        "http_p50_from_event_loop_us",
        "host_p50_us",
        "embed_requests_per_s",
        "floor_requests_per_s",
        "client_cpu_us_per_request",
    )
    return [
        Figure(
            "http_overhead_ratio",
            "ratio",
            "p50 of one short POST /embed over a kept-alive connection from a blocking client / "
            "p50 of host.embed of the same text in-process (mock model)",
            series.ratio("http_p50_us", "host_p50_us"),
            Target("<=", 3.0),
            parts,
        ),
        Figure(
            "http_throughput_ratio_vs_asgi_floor",
            "ratio",
            f"requests/s of POST /embed at {CONNECTIONS} connections / requests/s of a bare ASGI "
            "endpoint on the same server answering a fixed vector of the same size",
            series.ratio("embed_requests_per_s", "floor_requests_per_s"),
            Target(">=", 0.7),
            parts,
        ),
    ]


async def _measure(mode: Mode, port: int) -> Series:
    series = Series()
    per_connection = max(2, mode.latency_samples // 20)
    async with open_host(rig.config(), plugins=rig.plugins()) as host:
        await rig.warm(host)
        texts = [rig.SHORT_TEXT]
        # One connection of each kind per repetition: the server closes
        # connections idle for 5 s (uvicorn's keep-alive timeout), as the
        # throughput rounds leave them.
        single: list[BlockingConnection] = []
        looped: list[Connection] = []

        async def over_http() -> None:
            single[-1].request(EMBED)  # blocks the loop: nothing else runs meanwhile

        async def over_http_from_loop() -> None:
            await looped[-1].request(EMBED)

        async def in_process() -> None:
            await host.embed(rig.MODEL, texts)

        for rep in range(mode.repetitions):
            single.append(BlockingConnection(port))
            looped.append(await Connection.open(port))
            for _ in range(20):
                await over_http()
                await over_http_from_loop()
            http_p50, host_p50, looped_p50 = await rotating_p50(
                [over_http, in_process, over_http_from_loop], mode.latency_samples
            )
            tail = await _p99(over_http, mode.latency_samples)
            single[-1].close()
            await looped[-1].aclose()
            rates: dict[str, float] = {}
            cpu: list[float] = []
            for name in ("embed", "floor") if rep % 2 == 0 else ("floor", "embed"):
                raw = EMBED if name == "embed" else FLOOR
                rate, cpu_per_request, _ = await throughput(port, raw, per_connection)
                rates[name] = rate
                cpu.append(cpu_per_request)
            series.add(
                http_p50_us=http_p50,
                host_p50_us=host_p50,
                http_p50_from_event_loop_us=looped_p50,
                http_p99_us=tail,
                embed_requests_per_s=rates["embed"],
                floor_requests_per_s=rates["floor"],
                client_cpu_us_per_request=statistics.mean(cpu),
            )
    return series


async def _p99(call: Callable[[], Awaitable[object]], samples: int) -> float:
    """p99 (µs) of sequential calls."""
    times = []
    for _ in range(max(samples // 4, 10)):
        start = now_ns()
        await call()
        times.append(now_ns() - start)
    times.sort()
    return times[min(len(times) - 1, int(len(times) * 0.99))] / 1_000


async def throughput(port: int, raw: bytes, per_connection: int) -> tuple[float, float, list[int]]:
    """Requests/s of :data:`CONNECTIONS` connections each sending ``per_connection``
    requests back to back, this process's CPU µs per request meanwhile, and
    every request's latency (ns)."""
    connections = [await Connection.open(port) for _ in range(CONNECTIONS)]
    for connection in connections:
        await connection.request(raw)

    latencies: list[int] = []

    async def drive(connection: Connection) -> None:
        for _ in range(per_connection):
            start = now_ns()
            await connection.request(raw)
            latencies.append(now_ns() - start)

    cpu = time.process_time()
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for connection in connections:
            tg.start_soon(drive, connection)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    for connection in connections:
        await connection.aclose()
    total = CONNECTIONS * per_connection
    return total / elapsed, cpu / total * 1e6, latencies
