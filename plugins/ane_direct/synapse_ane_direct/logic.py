"""The direct-ANE worker's frame handling, over any :class:`~.device.Device`.

Shared by the subprocess worker and the in-process variant, so tests of the
one say something about the other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping

from synapse_core.wire import (
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
from synapse_core.worker_kit import Action, Reply, Stop

from . import __version__
from .device import Device, DeviceError
from .options import AneOptions

IMPLEMENTATION = "synapse-ane-direct"

TraceSink = Callable[[dict[str, object]], None]


def file_sink(path: str) -> TraceSink:
    """Append one JSON line per record, flushed before the frame is acted on."""

    def write(record: dict[str, object]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    return write


class AneLogic:
    """One direct-ANE worker generation (a :class:`~synapse_core.worker_kit.WorkerLogic`).

    ``facts`` are recorded with the hello trace record (e.g. whether ``TMPDIR``
    was set and whether the lane lock was inherited), so tests can check the
    environment a worker really ran in.
    """

    ignore_sigterm = False

    def __init__(
        self,
        *,
        model: str,
        package: str,
        generation: int,
        options: AneOptions,
        device: Device,
        pid: int | None = None,
        trace_sink: TraceSink | None = None,
        facts: Mapping[str, object] | None = None,
    ) -> None:
        self.model = model
        self.package = package
        self.generation = generation
        self.options = options
        self.device = device
        self.pid = os.getpid() if pid is None else pid
        self.facts = dict(facts or {})
        self.shapes: set[Shape] = set()
        self._sinks: list[TraceSink] = []
        if options.trace:
            self._sinks.append(file_sink(options.trace))
        if trace_sink is not None:
            self._sinks.append(trace_sink)

    def _trace(
        self,
        frame: str,
        shape: Shape | None = None,
        request_id: int | None = None,
        **extra: object,
    ) -> None:
        if not self._sinks:
            return
        record: dict[str, object] = {
            "pid": self.pid,
            "model": self.model,
            "generation": self.generation,
            "frame": frame,
            "shape": [shape.bucket, shape.batch] if shape else None,
            "request_id": request_id,
            **extra,
        }
        for sink in self._sinks:
            sink(record)

    def hello(self) -> Hello:
        o = self.options
        self._trace("hello", None, None, device=self.device.kind, **self.facts)
        return Hello(
            protocol=PROTOCOL_VERSION,
            implementation=f"{IMPLEMENTATION} ({self.device.kind} device)",
            version=__version__,
            model=self.model,
            package=self.package,
            generation=self.generation,
            pid=self.pid,
            buckets=sorted(o.buckets),
            dims=o.dims,
            max_batch=o.max_batch,
            identity=f"ane-direct:{self.package}:{self.device.identity}:v1",
        )

    def handle(self, frame: Frame) -> Action:
        match frame:
            case Admit():
                return self._admit(frame)
            case Infer():
                self._trace("infer", frame.shape, frame.request_id, rows=len(frame.sequences))
                return self._infer(frame)
            case Evict(request_id=rid, shape=shape):
                self._trace("evict", shape, rid)
                self.shapes.discard(shape)
                self.device.evict(shape)
                return Reply(Evicted(rid, shape))
            case InventoryRequest(request_id=rid):
                self._trace("inventory", None, rid)
                return Reply(Inventory(rid, sorted(self.shapes, key=lambda s: (s.bucket, s.batch))))
            case Shutdown():
                self._trace("shutdown")
                self.device.close()
                return Stop()
        self._trace("unknown")
        return Reply(Failure(-1, "unexpected-frame", f"unexpected {type(frame).__name__}"))

    def _admit(self, frame: Admit) -> Action:
        shape, rid = frame.shape, frame.request_id
        o = self.options
        if shape.bucket not in o.buckets or not 0 < shape.batch <= o.max_batch:
            self._trace("admit", shape, rid, refused="bad-shape")
            problem = f"cannot compile {shape}: not a reported bucket and batch"
            return Reply(Failure(rid, "bad-shape", problem))
        try:
            cold = self.device.compile(shape)
        except DeviceError as exc:
            self._trace("admit", shape, rid, refused=exc.code)
            return Reply(Failure(rid, exc.code, str(exc)))
        self.shapes.add(shape)
        self._trace("admit", shape, rid, cold=cold)
        return Reply(Admitted(rid, shape, cold, shape.bucket * shape.batch))

    def _infer(self, frame: Infer) -> Action:
        shape, rid = frame.shape, frame.request_id
        query = frame.query or []
        problem = None
        if shape not in self.shapes:
            problem = f"shape {shape} is not admitted"
        elif len(frame.sequences) > shape.batch:
            problem = f"{len(frame.sequences)} sequences exceed batch {shape.batch}"
        elif any(len(seq) + len(query) > shape.bucket for seq in frame.sequences):
            problem = f"a sequence exceeds bucket {shape.bucket}"
        if problem:
            return Reply(Failure(rid, "bad-request", problem))
        try:
            rows = self.device.run(shape, frame.task, frame.sequences, frame.query)
        except DeviceError as exc:
            return Reply(Failure(rid, exc.code, str(exc)))
        width = 1 if frame.task == "rerank" else self.options.dims
        return Reply(Output(rid, shape, len(rows), width, pack_rows(rows)))
