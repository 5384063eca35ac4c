"""What the benchmark groups are built from: hosts, workers, inputs, bare exchanges.

Hosts get their plugins explicitly (never the installed entry points), so a
run measures exactly the mock transport and the core.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from typing import Any

import anyio

from synapse_core.channel import Exchange, FramedChannel
from synapse_core.config import HostConfig
from synapse_core.handoff import OneShot
from synapse_core.host import Host
from synapse_core.residency.worker import Worker
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.transport import Transport
from synapse_core.wire import Frame, Infer, Output, Shape, check_rows, rows_of
from synapse_mock_transport.transport import MockTransport

MODEL = "bench"
PACKAGE = "bench-mock"
#: one short text: two words, four positions with the special tokens
SHORT_TEXT = "hello synapse"
BUCKETS = (16, 32, 64, 128, 256, 512)
DIMS = 64
MAX_BATCH = 32
#: mock options shared by every benchmark worker
OPTIONS: dict[str, Any] = {"buckets": list(BUCKETS), "dims": DIMS, "max_batch": MAX_BATCH}


def model(name: str = MODEL, **options: Any) -> dict[str, Any]:
    """A catalog entry of the mock package; ``options`` override :data:`OPTIONS`."""
    return model_entry(name, package=PACKAGE, ceiling=BUCKETS[-1], defaults=OPTIONS, **options)


def config(*models: dict[str, Any], **settings: Any) -> HostConfig:
    """A configuration of ``models`` (by default, :func:`model`'s entry)."""
    return host_config(*(models or (model(),)), **settings)


def plugins(transport: Transport | None = None, extra: Iterable[object] = ()) -> list[object]:
    """The mock subprocess transport (or ``transport``) plus ``extra`` plugin objects."""
    return [transport_plugin(transport or MockTransport()), *extra]


async def warm(
    host: Host, name: str = MODEL, texts: Iterable[str] = (SHORT_TEXT,), calls: int = 20
) -> Worker:
    """Start ``name``'s worker, admit the shapes ``texts`` need and warm the
    path with ``calls`` calls; return the worker's record."""
    await host.load(name)
    for _ in range(calls):
        await host.embed(name, list(texts))
    worker = host.worker(name)
    assert worker is not None and worker.channel is not None and worker.hello is not None
    return worker


_bare_ids = itertools.count(1 << 40)


class BareExchange:
    """Exchanges on a worker's own channel with no host or supervisor in between.

    The channel is the worker's pipe pair wrapped in the core's
    ``FramedChannel``: the same worker, pipes and codec the host uses.
    """

    def __init__(self, channel: FramedChannel, timeout_s: float = 30.0) -> None:
        self.channel = channel
        self.timeout_s = timeout_s

    async def infer(self, shape: Shape, sequences: list[list[int]]) -> Frame:
        frame = Infer(next(_bare_ids), shape, "embed", sequences)
        return await self.channel.exchange(frame, self.timeout_s)

    async def replay(self, frames: Iterable[Infer]) -> None:
        """Send ``frames`` one after another, as a composed call's groups."""
        for frame in frames:
            await self.channel.exchange(frame, self.timeout_s)


class EssentialsPath:
    """One short embed with only the work any host of this design must do.

    Tokenise, choose the bucket, build and write the request, hand the
    exchange to a second task that reads the reply, then check and unpack
    the rows: no permit, in-flight guard, lease, plan or call record. Its
    p50 is what ``host.embed`` would take if its bookkeeping were free, so
    the difference between the two is what that bookkeeping costs.
    """

    def __init__(self, host: Host, worker: Worker, timeout_s: float = 30.0) -> None:
        assert worker.channel is not None and worker.hello is not None
        self.worker = worker
        self.channel = worker.channel
        self.hello = worker.hello
        self.select = host.plugins.bucket_selector(worker.hello.buckets, worker.spec)
        self.timeout_s = timeout_s
        self._event = anyio.Event
        self._wake = self._event()
        self._job: tuple[Exchange, OneShot, list[Frame]] | None = None

    async def reader(self) -> None:
        """The second task: run it in a task group for as long as ``embed`` is used."""
        while True:
            await self._wake.wait()
            self._wake = self._event()
            assert self._job is not None
            exchange, done, box = self._job
            box.append(await self.channel.complete(exchange, self.timeout_s))
            done.set()

    async def embed(self, text: str) -> list[list[float]]:
        tokenizer = self.worker.tokenizer
        ids = tokenizer.encode(text)
        bucket = self.select(tokenizer.sequence_length(ids))
        request = Infer(next(_bare_ids), Shape(bucket, self.hello.max_batch), "embed", [ids])
        exchange = self.channel.begin_now(request)
        assert exchange is not None, "nothing else uses the channel meanwhile"
        done, box = self._event(), list[Frame]()
        self._job = (exchange, done, box)
        self._wake.set()
        await done.wait()
        (reply,) = box
        assert isinstance(reply, Output)
        check_rows(reply)
        return rows_of(reply)


def skewed_texts(count: int, seed: int = 20240) -> list[str]:
    """``count`` texts whose lengths are skewed short with a long tail.

    Each word is one token. Lengths (special tokens included) spread over
    every bucket from 16 to 512: most texts are short, a few are near 512.
    """
    rng = random.Random(seed)
    # (weight, fewest words, most words)
    mix = ((55, 3, 14), (20, 15, 40), (12, 41, 110), (8, 111, 250), (5, 251, 508))
    weights = [w for w, _, _ in mix]
    texts = []
    for _ in range(count):
        _, low, high = rng.choices(mix, weights)[0]
        words = rng.randint(low, high)
        texts.append(" ".join(f"w{rng.randrange(50_000)}" for _ in range(words)))
    return texts


def smallest_fit(length: int, buckets: Iterable[int] = BUCKETS) -> int:
    return min(b for b in buckets if b >= length)
