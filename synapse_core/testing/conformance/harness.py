"""What the checks run on: a host for the subject, a worker started without
a host, texts that fill each bucket, and row comparisons."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import attrs

from ...call import EmbedResult
from ...channel import FramedChannel
from ...config import ModelSpec
from ...hookspecs import hookimpl
from ...host import Host
from ...opening import open_host
from ...process import confirm_exit
from ...transport import LaneSession, Launched, LaunchRequest, Transport
from ...wire import Codec, Frame, Hello, WorkerFrame
from .. import transport_plugin
from .subject import Subject, specs

#: Bounds that turn a hung worker into a failure; never timing claims.
BOUND_S = 60.0

TEXTS = ["the first text", "a second, different text", "third", "the first text"]
QUERY = "what does the first text say"


class LargestBucket:
    """Sends every sequence to the largest bucket (rows must not change)."""

    __name__ = "conformance-largest-bucket"

    @hookimpl
    def synapse_select_bucket(
        self, length: int, buckets: Sequence[int], model: ModelSpec
    ) -> int | None:
        return buckets[-1]


@asynccontextmanager
async def host_for(
    subject: Subject,
    transport: Transport | None = None,
    *extra: object,
    models: Sequence[Mapping[str, Any]] = (),
) -> AsyncIterator[Host]:
    """A host serving ``subject`` (or its ``transport`` variant) with ``extra`` plugins."""
    plugins = [transport_plugin(transport or subject.transport), *extra]
    async with open_host(subject.config(*models), plugins=plugins) as host:
        yield host


@attrs.define
class Direct:
    """A worker started without a host, and the host's end of its channel."""

    launched: Launched
    channel: FramedChannel
    hello: Hello
    ids: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))

    async def ask(self, make: Callable[[int], Frame]) -> Frame:
        return await self.channel.exchange(make(next(self.ids)), BOUND_S)


@asynccontextmanager
async def direct(
    transport: Transport, entry: Mapping[str, Any], generation: int = 1
) -> AsyncIterator[Direct]:
    """Launch one worker as the host would (lane opened first if it needs a lock)."""
    spec = next(iter(specs(entry)))
    lane = transport.lane_for(spec)
    session: LaneSession | None = None
    if lane.hardware_lock:
        session = await transport.open_lane(lane)
    try:
        async with anyio.create_task_group() as tg:
            request = LaunchRequest(spec, f"{spec.name}#direct", generation, lane, session, tg)
            launched = await transport.launch(request)
            try:
                channel = FramedChannel(launched.send, launched.receive, Codec(WorkerFrame))
                with anyio.fail_after(BOUND_S):
                    hello = await channel.receive()
                assert isinstance(hello, Hello), f"the first frame must be a hello, got {hello!r}"
                yield Direct(launched, channel, hello)
            finally:
                with anyio.CancelScope(shield=True):
                    for stream in (launched.send, launched.receive):
                        with suppress(anyio.BrokenResourceError, OSError):
                            await stream.aclose()
                    exited = await confirm_exit(launched.process, 10.0)
            assert exited, f"worker {launched.process.pid} did not exit when its channel closed"
    finally:
        if session is not None:
            session.close()


def texts_across_buckets(host: Host, transport: Transport, name: str) -> list[str]:
    """Texts that fill each of the worker's buckets, mixed with short ones."""
    worker = host.worker(name)
    assert worker is not None and worker.hello is not None
    tokenizer = transport.tokenizer(worker.spec)
    buckets = worker.hello.buckets
    ceiling = min(worker.spec.ceiling, buckets[-1])

    def fits(words: int, bucket: int) -> bool:
        text = " ".join(f"w{i % 50}" for i in range(words))
        return tokenizer.sequence_length(tokenizer.encode(text)) <= bucket

    texts = []
    for bucket in [b for b in buckets if b < ceiling] + [ceiling]:
        # The most words that still fit this bucket: the text runs in it, not a smaller one.
        words = 1
        while fits(words + 1, bucket):
            words += 1
        texts.append(" ".join(f"w{i % 50}" for i in range(words)))
    mixed = []
    for i, text in enumerate(reversed(texts)):
        mixed += [text, f"short text {i}"]
    return mixed


def rows_close(a: Sequence[float], b: Sequence[float], atol: float) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, abs_tol=atol) for x, y in zip(a, b, strict=True)
    )


def assert_finite(rows: Sequence[Sequence[float]] | Sequence[float], what: str) -> None:
    flat = [v for row in rows for v in (row if isinstance(row, Sequence) else [row])]
    bad = [v for v in flat if not math.isfinite(v)]
    assert not bad, f"{what}: {len(bad)} values are not finite, e.g. {bad[0]!r}"


async def embedded(host: Host, name: str) -> tuple[EmbedResult, Hello]:
    """``TEXTS`` embedded, and the hello of the worker that served them."""
    result = await host.embed(name, TEXTS)
    worker = host.worker(name)
    assert worker is not None and worker.hello is not None
    return result, worker.hello
