"""A 1024-text composed call with a skewed length mix over buckets 16…512.

Padding is counted from the frames the host actually sends: a tap on the
worker's stdin pipe decodes every ``Infer`` frame of one recorded call. Its
padded tokens are rows x bucket; its real tokens are each sequence's length
with the special tokens, which is what the bucket must hold. The wall-time
baseline replays exactly those frames as bare exchanges on the same channel.
"""

from __future__ import annotations

import statistics
import time

import anyio
import attrs
from anyio.abc import ByteSendStream

from synapse_core.host import Host
from synapse_core.opening import open_host
from synapse_core.tokenizer import Tokenizer
from synapse_core.transport import Launched, LaunchRequest
from synapse_core.wire import PREFIX, Codec, HostFrame, Infer
from synapse_mock_transport.transport import MockTransport

from . import rig
from .harness import Figure, Mode, Series, Target

TEXTS = 1024


class FrameTap:
    """Decodes the host's frames to a worker while ``recording`` is on."""

    def __init__(self) -> None:
        self.recording = False
        self.frames: list[Infer] = []
        self._buffer = bytearray()
        self._codec = Codec(HostFrame)

    def feed(self, data: bytes) -> None:
        if not self.recording:
            return
        self._buffer += data
        while len(self._buffer) >= PREFIX.size:
            (length,) = PREFIX.unpack_from(self._buffer)
            end = PREFIX.size + length
            if len(self._buffer) < end:
                return
            frame = self._codec.decode(bytes(self._buffer[PREFIX.size : end]))
            del self._buffer[:end]
            if isinstance(frame, Infer):
                self.frames.append(frame)

    def take(self) -> list[Infer]:
        frames, self.frames = self.frames, []
        return frames


class TapSendStream(ByteSendStream):
    def __init__(self, inner: ByteSendStream, tap: FrameTap) -> None:
        self._inner = inner
        self._tap = tap

    def send_nowait(self, item: bytes) -> int:
        """What the worker pipe takes now, as the untapped pipe would (see
        :class:`synapse_core.channel.FramedChannel`)."""
        sent: int = self._inner.send_nowait(item)  # type: ignore[attr-defined]
        self._tap.feed(item[:sent])
        return sent

    async def send(self, item: bytes) -> None:
        self._tap.feed(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()


class TappedMockTransport(MockTransport):
    """The mock subprocess transport with a :class:`FrameTap` on each worker's stdin."""

    def __init__(self, tap: FrameTap) -> None:
        self.tap = tap

    async def launch(self, request: LaunchRequest) -> Launched:
        launched = await super().launch(request)
        return attrs.evolve(launched, send=TapSendStream(launched.send, self.tap))


@attrs.frozen
class Padding:
    real: int
    padded: int
    padded_full_batches: int
    optimal: int
    pad_to_max: int
    rows: int


def padding(frames: list[Infer], tokenizer: Tokenizer, buckets: tuple[int, ...]) -> Padding:
    lengths = [tokenizer.sequence_length(seq) for f in frames for seq in f.sequences]
    top = rig.smallest_fit(max(lengths), buckets)
    return Padding(
        real=sum(lengths),
        padded=sum(len(f.sequences) * f.shape.bucket for f in frames),
        padded_full_batches=sum(f.shape.batch * f.shape.bucket for f in frames),
        optimal=sum(rig.smallest_fit(n, buckets) for n in lengths),
        pad_to_max=top * len(lengths),
        rows=len(lengths),
    )


def measure(mode: Mode) -> list[Figure]:
    series: Series = anyio.run(_measure, mode)
    ratios = {
        "composed_padding_ratio": series.ratio("padded", "real"),
        "optimal_padding_ratio": series.ratio("optimal", "real"),
        "pad_to_max_padding_ratio": series.ratio("pad_to_max", "real"),
    }
    tokens = series.medians("real", "padded", "padded_full_batches", "rows", "frames")
    return [
        Figure(
            "composed_padding_ratio",
            "ratio",
            f"padded / real tokens of a {TEXTS}-text skewed call, as sent to the worker",
            ratios["composed_padding_ratio"],
            Target("==", 0.0, against="optimal_padding_ratio"),
            {
                **tokens,
                "full_batch_padding_ratio": statistics.median(
                    series.ratio("padded_full_batches", "real")
                ),
            },
        ),
        Figure(
            "optimal_padding_ratio",
            "ratio",
            "smallest-fit optimum for the same lengths",
            ratios["optimal_padding_ratio"],
        ),
        Figure(
            "pad_to_max_padding_ratio",
            "ratio",
            "every text padded to the bucket of the longest",
            ratios["pad_to_max_padding_ratio"],
        ),
        Figure(
            "composed_wall_ratio_vs_raw",
            "ratio",
            "wall time of that call through the host / its frames as bare exchanges",
            series.ratio("host_ms", "raw_ms"),
            Target("<=", 1.10),
            series.medians("host_ms", "raw_ms", "tokenize_ms"),
        ),
    ]


async def _measure(mode: Mode) -> Series:
    texts = rig.skewed_texts(TEXTS)
    tap = FrameTap()
    series = Series()
    async with open_host(rig.config(), plugins=rig.plugins(TappedMockTransport(tap))) as host:
        worker = await rig.warm(host, texts=texts, calls=2)
        assert worker.channel is not None
        bare = rig.BareExchange(worker.channel)
        for rep in range(mode.repetitions):
            tap.recording = True
            await host.embed(rig.MODEL, texts)
            tap.recording = False
            frames = tap.take()
            pad = padding(frames, worker.tokenizer, rig.BUCKETS)
            assert pad.rows == len(texts), "the recorded call lost rows"
            host_ms, raw_ms = await _walls(host, bare, texts, frames, mode.composed_pairs, rep)
            start = time.perf_counter()
            for text in texts:
                worker.tokenizer.encode(text)
            tokenize_ms = (time.perf_counter() - start) * 1e3
            series.add(
                **{k: float(v) for k, v in attrs.asdict(pad).items()},
                frames=float(len(frames)),
                host_ms=host_ms,
                raw_ms=raw_ms,
                # encoding every text alone, most of it overlapped with the
                # worker's compute in the host's call
                tokenize_ms=tokenize_ms,
            )
    return series


async def _walls(
    host: Host, bare: rig.BareExchange, texts: list[str], frames: list[Infer], pairs: int, rep: int
) -> tuple[float, float]:
    """Median wall times (ms) of the call through the host and of its bare replay."""
    host_ms: list[float] = []
    raw_ms: list[float] = []
    for i in range(pairs):
        for side in (0, 1) if (rep + i) % 2 == 0 else (1, 0):
            start = time.perf_counter()
            if side == 0:
                await host.embed(rig.MODEL, texts)
                host_ms.append((time.perf_counter() - start) * 1e3)
            else:
                await bare.replay(frames)
                raw_ms.append((time.perf_counter() - start) * 1e3)
    return statistics.median(host_ms), statistics.median(raw_ms)
