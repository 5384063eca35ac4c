"""The mock worker's behaviour: deterministic outputs, fault knobs and tracing.

Shared by the subprocess worker and the in-process variant, so both behave
identically and the in-process tests say something about the real one.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable

from synapse_core.wire import (
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
    Output,
    Shape,
    Shutdown,
    pack_rows,
)
from synapse_core.worker_kit import Action, Crash, Hang, RawReply, Reply, Stop

from . import __version__
from .options import MockOptions

IMPLEMENTATION = "synapse-mock-transport"
# 0xc1 is never used in MessagePack: a frame of it cannot decode.
MALFORMED = PREFIX.pack(4) + b"\xc1\xc1\xc1\xc1"

_TRACE_NAMES = {
    Admit: "admit",
    Infer: "infer",
    Evict: "evict",
    InventoryRequest: "inventory",
    Shutdown: "shutdown",
}


FEATURES_PER_TOKEN = 8


@functools.lru_cache(maxsize=1 << 16)
def _features(token: int) -> tuple[tuple[int, float], ...]:
    """A token's hashed features: (index seed, sign) pairs from a splitmix64 walk."""
    out = []
    state = token & 0xFFFFFFFFFFFFFFFF
    for _ in range(FEATURES_PER_TOKEN):
        state = (state + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        z ^= z >> 31
        out.append((z >> 1, 1.0 if z & 1 else -1.0))
    return tuple(out)


def embed_tokens(tokens: list[int], dims: int) -> list[float]:
    """Feature hashing of token ids into ``dims`` floats, L2-normalised.

    Each token sets several signed features, so texts sharing words score
    high and unrelated texts score near (not exactly) zero, like a real model.
    """
    vec = [0.0] * dims
    for token in tokens:
        for seed, sign in _features(token):
            vec[seed % dims] += sign
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0], norm = 1.0, 1.0
    return [v / norm for v in vec]


class MockLogic:
    """One mock worker generation."""

    def __init__(
        self,
        *,
        model: str,
        package: str,
        generation: int,
        options: MockOptions,
        pid: int | None = None,
        trace_sink: Callable[[dict[str, object]], None] | None = None,
    ) -> None:
        self.model = model
        self.package = package
        self.generation = generation
        self.options = options
        self.pid = os.getpid() if pid is None else pid
        self.faults = options.faults if options.faults.active(generation) else None
        self.ignore_sigterm = bool(self.faults and self.faults.ignore_sigterm)
        self.shapes: set[Shape] = set()
        self.admits = 0
        self.infers = 0
        self._sinks: list[Callable[[dict[str, object]], None]] = []
        if options.trace:
            self._sinks.append(self._file_sink(options.trace))
        if trace_sink is not None:
            self._sinks.append(trace_sink)

    @staticmethod
    def _file_sink(path: str) -> Callable[[dict[str, object]], None]:
        def write(record: dict[str, object]) -> None:
            # One append per line, flushed before the frame is acted on, so a
            # frame that crashes the worker is still on record.
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(record) + "\n")
                fh.flush()

        return write

    def _trace(self, frame: str, shape: Shape | None = None, request_id: int | None = None) -> None:
        if not self._sinks:
            return
        record: dict[str, object] = {
            "pid": self.pid,
            "model": self.model,
            "generation": self.generation,
            "frame": frame,
            "shape": [shape.bucket, shape.batch] if shape else None,
            "request_id": request_id,
        }
        for sink in self._sinks:
            sink(record)

    def hello(self) -> Hello:
        self._trace("hello")
        o = self.options
        return Hello(
            protocol=PROTOCOL_VERSION,
            implementation=IMPLEMENTATION,
            version=__version__,
            model=self.model,
            package=self.package,
            generation=self.generation,
            pid=self.pid,
            buckets=sorted(o.buckets),
            dims=o.dims,
            max_batch=o.max_batch,
            identity=f"mock:{self.package}:d{o.dims}:v1",
        )

    def _reply(self, frame: Frame, extra_delay: float = 0.0) -> Reply:
        delay = (self.faults.reply_delay_s if self.faults else 0.0) + extra_delay
        return Reply(frame, delay)

    def handle(self, frame: Frame) -> Action:
        shape = getattr(frame, "shape", None)
        self._trace(
            _TRACE_NAMES.get(type(frame), "unknown"), shape, getattr(frame, "request_id", None)
        )
        match frame:
            case Admit():
                return self._admit(frame)
            case Infer():
                return self._infer(frame)
            case Evict(request_id=rid, shape=shape):
                self.shapes.discard(shape)
                return self._reply(Evicted(rid, shape))
            case InventoryRequest(request_id=rid):
                ordered = sorted(self.shapes, key=lambda s: (s.bucket, s.batch))
                return self._reply(Inventory(rid, ordered))
            case Shutdown():
                return Stop()
        return self._reply(Failure(-1, "unexpected-frame", f"unexpected {type(frame).__name__}"))

    def _admit(self, frame: Admit) -> Action:
        self.admits += 1
        f = self.faults
        if f and f.crash_on_admit == self.admits:
            return Crash()
        shape = frame.shape
        if (
            shape.bucket not in self.options.buckets
            or not 0 < shape.batch <= self.options.max_batch
        ):
            return self._reply(Failure(frame.request_id, "bad-shape", f"cannot compile {shape}"))
        cold = shape not in self.shapes
        self.shapes.add(shape)
        extra = f.cold_admit_delay_s if (f and cold) else 0.0
        return self._reply(
            Admitted(frame.request_id, shape, cold, shape.bucket * shape.batch), extra
        )

    def _infer(self, frame: Infer) -> Action:
        self.infers += 1
        f = self.faults
        if f and f.crash_on_infer == self.infers:
            return Crash()
        if f and f.hang_on_infer == self.infers:
            return Hang()
        if f and f.malformed_on_infer == self.infers:
            return RawReply(MALFORMED, f.reply_delay_s)
        shape = frame.shape
        problem = None
        if shape not in self.shapes:
            problem = f"shape {shape} is not admitted"
        elif len(frame.sequences) > shape.batch:
            problem = f"{len(frame.sequences)} sequences exceed batch {shape.batch}"
        elif any(len(seq) > shape.bucket for seq in frame.sequences):
            problem = f"a sequence exceeds bucket {shape.bucket}"
        if problem:
            return self._reply(Failure(frame.request_id, "bad-request", problem))
        dims = self.options.dims
        vectors = [embed_tokens(seq, dims) for seq in frame.sequences]
        if frame.task == "rerank":
            q = embed_tokens(frame.query or [], dims)
            rows: list[list[float]] = [
                [sum(a * b for a, b in zip(q, v, strict=True))] for v in vectors
            ]
            width = 1
        else:
            rows, width = vectors, dims
        return self._reply(Output(frame.request_id, shape, len(rows), width, pack_rows(rows)))
