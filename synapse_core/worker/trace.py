"""Worker tracing: one JSON-able record per frame a worker handles.

A record names the worker (``pid``, ``model``, ``generation``), the frame
(``frame``, ``shape``, ``request_id``) and what came of it: ``cold`` for an
admission, ``refused`` with the failure code, ``rows`` for an inference, and
``fault`` when an injected fault answered instead (``crash``, ``hang``,
``malformed``). Records are written after the worker decided what to do and
before it does it, so a frame that crashes the worker is still on record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..wire import (
    Admit,
    Admitted,
    Evict,
    Failure,
    Frame,
    Hello,
    Infer,
    InventoryRequest,
    Shape,
    Shutdown,
)
from .loop import Action, Crash, Hang, RawReply, Reply, WorkerLogic

TraceSink = Callable[[dict[str, object]], None]

_NAMES: dict[type[Frame], str] = {
    Admit: "admit",
    Infer: "infer",
    Evict: "evict",
    InventoryRequest: "inventory",
    Shutdown: "shutdown",
}
_FAULTS: dict[type[object], str] = {Crash: "crash", Hang: "hang", RawReply: "malformed"}


def file_sink(path: str) -> TraceSink:
    """Append one JSON line per record; each line is on disk before the frame is acted on."""

    import json

    def write(record: dict[str, object]) -> None:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    return write


class Traced:
    """A :class:`~.loop.WorkerLogic` that records every frame of ``inner``."""

    def __init__(
        self,
        inner: WorkerLogic,
        sinks: Sequence[TraceSink],
        *,
        pid: int,
        model: str,
        generation: int,
        facts: Mapping[str, object] | None = None,
    ) -> None:
        self.inner = inner
        self.ignore_sigterm = inner.ignore_sigterm
        self._sinks = tuple(sinks)
        self._who: dict[str, object] = {"pid": pid, "model": model, "generation": generation}
        self._facts = dict(facts or {})

    def _emit(
        self, frame: str, shape: Shape | None, request_id: int | None, **extra: object
    ) -> None:
        record: dict[str, object] = {
            **self._who,
            "frame": frame,
            "shape": [shape.bucket, shape.batch] if shape else None,
            "request_id": request_id,
            **extra,
        }
        for sink in self._sinks:
            sink(record)

    def hello(self) -> Hello:
        hello = self.inner.hello()
        self._emit("hello", None, None, **self._facts)
        return hello

    def handle(self, frame: Frame) -> Action:
        action = self.inner.handle(frame)
        extra: dict[str, object] = {}
        if isinstance(frame, Infer):
            extra["rows"] = len(frame.sequences)
        fault = _FAULTS.get(type(action))
        if fault is not None:
            extra["fault"] = fault
        elif isinstance(action, Reply):
            reply = action.frame
            if isinstance(reply, Admitted):
                extra["cold"] = reply.cold
            elif isinstance(reply, Failure):
                extra["refused"] = reply.code
        self._emit(
            _NAMES.get(type(frame), "unknown"),
            getattr(frame, "shape", None),
            getattr(frame, "request_id", None),
            **extra,
        )
        return action

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
