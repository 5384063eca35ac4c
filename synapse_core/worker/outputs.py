"""Packing what a worker's methods return into the wire's layout of each
:class:`~synapse_core.kinds.Kind` (:class:`~synapse_core.wire.Output`).

A fixed-width kind's rows are packed as :func:`packed` packs them;
a sparse row is ``(indices, weights)`` and a multi-vector row one vector
per token, as sequences or numpy arrays (read through their own methods:
the core never imports numpy). What is packed is checked as the host will
check it, so a worker's mistake is its ``bad-output`` failure, never a
malformed frame that would cost the worker its generation.
"""

from __future__ import annotations

import sys
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..errors import Declined
from ..kinds import Kind, check_part, pack_ragged
from ..wire import Failure, Frame, Infer, Output, Part, Shape, pack_rows


class Author(Protocol):
    """What :func:`outputs_reply` uses of a ``ModelWorker``."""

    dims: int
    shape: Shape

    def embed(self, batch: list[list[int]]) -> Any: ...
    def rerank(self, query: list[int], batch: list[list[int]]) -> Any: ...
    def sparse(self, batch: list[list[int]]) -> Any: ...
    def multi(self, batch: list[list[int]]) -> Any: ...
    def outputs(self, batch: list[list[int]], kinds: Sequence[Kind]) -> list[Any]: ...


def pack_part(kind: Kind, out: Any, rows: int, width: int, bucket: int) -> Part:
    """``out``, a worker's ``rows`` rows of ``kind``, as a checked :class:`Part`."""
    if kind is Kind.SPARSE:
        part = _sparse(out, rows, width)
    elif kind is Kind.MULTI:
        part = _multi(out, rows, width)
    else:
        part = Part(
            kind, width, packed(out, rows, width, "rerank" if kind is Kind.SCORE else "embed")
        )
    try:
        check_part(kind, rows, width, part.data, part.lengths, part.indices, bucket)
    except Exception as exc:  # a WireError here is the worker's bad output
        raise ValueError(str(exc)) from None
    return part


def packed(out: Any, rows: int, width: int, task: str) -> bytes:
    """``out`` as little-endian float32 bytes, checked to be ``rows`` x ``width``.

    An array (numpy's, or anything with ``shape``, ``astype`` and
    ``tobytes``) is converted by its own methods: the core never imports numpy.
    """
    shape = getattr(out, "shape", None)
    if shape is not None and hasattr(out, "astype"):
        allowed = ((rows,), (rows, 1)) if task == "rerank" else ((rows, width),)
        if tuple(shape) not in allowed:
            raise ValueError(f"returned an array of shape {tuple(shape)}, expected {allowed[0]}")
        if getattr(out, "dtype", None) != "<f4":  # a float32 array is written as it is
            out = out.astype("<f4")
        return bytes(out.tobytes())
    if len(out) != rows:
        raise ValueError(f"returned {len(out)} results for {rows} sequences")
    if task == "rerank":
        flat = array("f", [s[0] if isinstance(s, Sequence) else s for s in out])
        if sys.byteorder != "little":
            flat.byteswap()
        return flat.tobytes()
    for row in out:
        if len(row) != width:
            raise ValueError(f"returned a row of {len(row)} values; dims is {width}")
    return pack_rows(out)


def _rows(out: Any, rows: int) -> Sequence[Any]:
    if len(out) != rows:
        raise ValueError(f"returned {len(out)} results for {rows} sequences")
    return out  # type: ignore[no-any-return]


def _sparse(out: Any, rows: int, width: int) -> Part:
    counts: list[int] = []
    indices: list[bytes] = []
    values: list[bytes] = []
    for row in _rows(out, rows):
        if len(row) != 2:
            raise ValueError("a sparse row must be (indices, weights)")
        positions, weights = row
        if len(positions) != len(weights):
            raise ValueError(
                f"a sparse row has {len(positions)} indices and {len(weights)} weights"
            )
        counts.append(len(positions))
        indices.append(_bytes(positions, "<i4", "i"))
        values.append(_bytes(weights, "<f4", "f"))
    return Part(Kind.SPARSE, width, b"".join(values), pack_ragged(counts), b"".join(indices))


def _multi(out: Any, rows: int, width: int) -> Part:
    counts: list[int] = []
    data: list[bytes] = []
    for row in _rows(out, rows):
        shape = getattr(row, "shape", None)
        if shape is not None and hasattr(row, "astype"):
            if len(shape) != 2 or shape[1] != width:
                raise ValueError(f"a multi-vector row of shape {tuple(shape)}; width is {width}")
            counts.append(int(shape[0]))
            data.append(_bytes(row, "<f4", "f"))
            continue
        for vector in row:
            if len(vector) != width:
                raise ValueError(f"a token vector of {len(vector)} values; width is {width}")
        counts.append(len(row))
        data.append(pack_rows(row))
    return Part(Kind.MULTI, width, b"".join(data), pack_ragged(counts))


def _bytes(values: Any, dtype: str, code: str) -> bytes:
    if hasattr(values, "astype") and hasattr(values, "tobytes"):
        if getattr(values, "dtype", None) != dtype:
            values = values.astype(dtype)
        return bytes(values.tobytes())
    flat = array(code, values)
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def outputs_reply(
    worker: Author,
    widths: Mapping[Kind, int],
    frame: Infer,
    notice: Callable[[int, int], int],
) -> Frame:
    """A request naming its outputs (checked as :meth:`_infer` checks the rest)."""
    rid, batch, kinds = frame.request_id, frame.sequences, frame.outputs
    widths = widths or {Kind.DENSE: worker.dims, Kind.SCORE: 1}
    problem = next((f"no {k.value} output" for k in kinds if k not in widths), "")
    if (Kind.SCORE in kinds) != (frame.task == "rerank") or len(set(kinds)) != len(kinds):
        problem = f"outputs {[k.value for k in kinds]} for a {frame.task} request"
    if problem:
        code = "unsupported-output" if problem.startswith("no ") else "bad-request"
        return Failure(rid, code, problem)
    query = frame.query
    worker.shape = frame.shape
    started = time.perf_counter_ns()
    if kinds == [Kind.SCORE]:
        out: Any = call_author(worker.rerank, query, batch)
    else:
        one = {Kind.DENSE: worker.embed, Kind.SPARSE: worker.sparse, Kind.MULTI: worker.multi}
        out = (
            call_author(one[kinds[0]], batch)
            if len(kinds) == 1
            else call_author(worker.outputs, batch, kinds)
        )
        if len(kinds) == 1 and not isinstance(out, Raised):
            out = [out]
    computed = notice(rid, started)
    if isinstance(out, Raised):
        return out.failure(rid)
    try:
        if kinds == [Kind.SCORE]:
            out = [out]
        if len(out) != len(kinds):
            raise ValueError(f"returned {len(out)} outputs for {len(kinds)} asked")
        parts = [
            pack_part(k, o, len(batch), widths[k], frame.shape.bucket)
            for k, o in zip(kinds, out, strict=True)
        ]
    except (TypeError, ValueError) as exc:
        return Failure(rid, "bad-output", f"{type(worker).__name__}: {exc}")
    first = parts[0]
    return Output(
        rid, frame.shape, len(batch), first.dims, first.data, first.kind,
        first.lengths, first.indices, parts[1:], compute_ns=computed,
    )  # fmt: skip


class Raised:
    """An exception author code raised, to be answered as a failure."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def failure(self, rid: int) -> Failure:
        exc = self.exc
        if isinstance(exc, Declined):
            return Failure(rid, exc.code, str(exc))
        return Failure(rid, "worker-error", f"{type(exc).__name__}: {exc}")


def call_author(method: Callable[..., Any], *args: Any) -> Any:
    """Call author code; an exception becomes a failure reply (traceback on stderr)."""
    try:
        return method(*args)
    except Declined as exc:
        return Raised(exc)
    except Exception as exc:
        import traceback  # only on this path: workers start faster without it

        traceback.print_exc(file=sys.stderr)
        return Raised(exc)


def guarded(rid: int, method: Callable[..., Any], *args: Any) -> Failure | None:
    out = call_author(method, *args)
    return out.failure(rid) if isinstance(out, Raised) else None
