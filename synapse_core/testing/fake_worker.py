"""The fake transport's worker: deterministic rows, fault knobs and a trace.

A minimal worker speaking the real protocol, so the core's own tests exercise
serving, residency and recovery with no plugin installed. Run as a process
(``python -m synapse_core.testing.fake_worker --spec JSON``) or in-process
through :class:`~synapse_core.testing.fake.InProcessFakeTransport`; both run
this same logic.

Catalog options (``[models.options]``): ``buckets``, ``dims``, ``max_batch``,
``faults`` (see :class:`Faults`) and ``trace`` (a file that gets one JSON line
per frame the worker receives, written before the frame is acted on).
"""

from __future__ import annotations

import json
import math
import os
import sys
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..config import FieldInvalid, structure
from ..wire import (
    PREFIX,
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Evict,
    Evicted,
    Failure,
    Frame,
    Hello,
    Infer,
    Inventory,
    InventoryRequest,
    LaunchSpec,
    Output,
    Shape,
    Shutdown,
    pack_rows,
)
from ..worker_kit import Action, Crash, Hang, RawReply, Reply, Stop, worker_main

IMPLEMENTATION = "synapse-core-fake"
VERSION = "1"
#: 0xc1 never occurs in MessagePack: a frame of it cannot be decoded.
UNDECODABLE = PREFIX.pack(4) + b"\xc1" * 4

TraceSink = Callable[[dict[str, object]], None]


@attrs.frozen
class Faults:
    """Fault knobs. Counts are per worker generation and start at 1."""

    reply_delay_s: float = 0.0
    cold_admit_delay_s: float = 0.0
    crash_on_infer: int | None = None
    malformed_on_infer: int | None = None
    hang_on_infer: int | None = None
    crash_on_admit: int | None = None
    ignore_sigterm: bool = False
    #: the knobs apply to this generation only (None: to every generation)
    only_generation: int | None = None


def _sizes(instance: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    if not value or min(value) <= 0:
        raise FieldInvalid(attribute.name, f"must be a non-empty list of sizes > 0, got {value}")


@attrs.frozen
class FakeOptions:
    buckets: tuple[int, ...] = attrs.field(default=(16, 32, 64, 128, 256, 512), validator=_sizes)
    dims: int = 64
    max_batch: int = 32
    faults: Faults = Faults()
    trace: str | None = None


def parse_options(options: Mapping[str, Any], source: str = "<options>") -> FakeOptions:
    """Structure catalog options; errors name the path (``options.faults.crash_on_infer``)."""
    return structure(dict(options), FakeOptions, source, root=".options")


def fake_vector(tokens: list[int], dims: int) -> list[float]:
    """A unit vector that depends only on ``tokens`` (never on batch mates)."""
    vec = [0.0] * dims
    for position, token in enumerate(tokens):
        digest = zlib.crc32(token.to_bytes(8, "little", signed=True))
        vec[digest % dims] += 1.0 if digest & 0x100 else -1.0
        vec[(digest >> 9) % dims] += 0.5 / (1 + position)
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def fake_score(query: list[int], document: list[int], dims: int) -> float:
    """The rerank score of ``document`` for ``query``: a dot product of fake vectors."""
    q, d = fake_vector(query, dims), fake_vector(document, dims)
    return sum(a * b for a, b in zip(q, d, strict=True))


def _file_sink(path: str) -> TraceSink:
    def write(record: dict[str, object]) -> None:
        # Appended and closed per frame, so a frame that crashes the worker
        # is already on record.
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    return write


_FRAME_NAMES: dict[type, str] = {
    Admit: "admit",
    Infer: "infer",
    Evict: "evict",
    InventoryRequest: "inventory",
    Shutdown: "shutdown",
}


class FakeLogic:
    """One fake worker generation (a :class:`~synapse_core.worker_kit.WorkerLogic`)."""

    def __init__(self, spec: LaunchSpec, *, pid: int | None = None, sink: TraceSink | None = None):
        self.spec = spec
        self.options = parse_options(spec.options)
        self.pid = os.getpid() if pid is None else pid
        knobs = self.options.faults
        active = knobs.only_generation in (None, spec.generation)
        self.faults = knobs if active else Faults()
        self.ignore_sigterm = self.faults.ignore_sigterm
        self.shapes: set[Shape] = set()
        self.counts = {"admit": 0, "infer": 0}
        self.sinks = [s for s in (sink,) if s is not None]
        if self.options.trace:
            self.sinks.append(_file_sink(self.options.trace))

    def _record(
        self, frame: str, shape: Shape | None = None, request_id: int | None = None
    ) -> None:
        record: dict[str, object] = {
            "pid": self.pid,
            "model": self.spec.model,
            "generation": self.spec.generation,
            "frame": frame,
            "shape": None if shape is None else [shape.bucket, shape.batch],
            "request_id": request_id,
        }
        for sink in self.sinks:
            sink(record)

    def hello(self) -> Hello:
        self._record("hello")
        o = self.options
        return Hello(
            protocol=PROTOCOL_VERSION,
            implementation=IMPLEMENTATION,
            version=VERSION,
            model=self.spec.model,
            package=self.spec.package,
            generation=self.spec.generation,
            pid=self.pid,
            buckets=sorted(o.buckets),
            dims=o.dims,
            max_batch=o.max_batch,
            identity=f"fake:{self.spec.package}:d{o.dims}",
        )

    def handle(self, frame: Frame) -> Action:
        name = _FRAME_NAMES.get(type(frame), "unknown")
        self._record(name, getattr(frame, "shape", None), getattr(frame, "request_id", None))
        if name in self.counts:
            self.counts[name] += 1
        if isinstance(frame, Shutdown):
            return Stop()
        if isinstance(frame, Admit):
            return self._admit(frame)
        if isinstance(frame, Infer):
            return self._infer(frame)
        if isinstance(frame, Evict):
            self.shapes.discard(frame.shape)
            return self._reply(Evicted(frame.request_id, frame.shape))
        if isinstance(frame, InventoryRequest):
            listed = sorted(self.shapes, key=lambda s: (s.bucket, s.batch))
            return self._reply(Inventory(frame.request_id, listed))
        return self._reply(Failure(-1, "unexpected-frame", f"unexpected {type(frame).__name__}"))

    def _reply(self, frame: Frame, extra_delay_s: float = 0.0) -> Reply:
        return Reply(frame, self.faults.reply_delay_s + extra_delay_s)

    def _admit(self, frame: Admit) -> Action:
        if self.faults.crash_on_admit == self.counts["admit"]:
            return Crash()
        shape, o = frame.shape, self.options
        if shape.bucket not in o.buckets or not 0 < shape.batch <= o.max_batch:
            return self._reply(Failure(frame.request_id, "bad-shape", f"cannot compile {shape}"))
        cold = shape not in self.shapes
        self.shapes.add(shape)
        delay = self.faults.cold_admit_delay_s if cold else 0.0
        return self._reply(
            Admitted(frame.request_id, shape, cold, shape.bucket * shape.batch), delay
        )

    def _infer(self, frame: Infer) -> Action:
        n, f = self.counts["infer"], self.faults
        if f.crash_on_infer == n:
            return Crash()
        if f.hang_on_infer == n:
            return Hang()
        if f.malformed_on_infer == n:
            return RawReply(UNDECODABLE, f.reply_delay_s)
        shape, sequences = frame.shape, frame.sequences
        if shape not in self.shapes:
            problem = f"shape {shape} is not admitted"
        elif len(sequences) > shape.batch or max(map(len, sequences), default=0) > shape.bucket:
            problem = f"{len(sequences)} sequences do not fit {shape}"
        else:
            problem = ""
        if problem:
            return self._reply(Failure(frame.request_id, "bad-request", problem))
        dims = self.options.dims
        if frame.task == "rerank":
            rows = [[fake_score(frame.query or [], seq, dims)] for seq in sequences]
        else:
            rows = [fake_vector(seq, dims) for seq in sequences]
        width = len(rows[0]) if rows else dims
        return self._reply(Output(frame.request_id, shape, len(rows), width, pack_rows(rows)))


def main(argv: list[str] | None = None) -> int:
    return worker_main(__name__, FakeLogic, argv)


if __name__ == "__main__":
    sys.exit(main())
