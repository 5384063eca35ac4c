"""The kinds of output a worker computes (:class:`Kind`), and the layout of
their rows on the wire: fixed-width rows of float32, and ragged rows (sparse
entries, token vectors) with a length per row, so that no row is cut to a
width. Checked without unpacking (:func:`check_part`), unpacked by
:func:`part_rows`.

Imported by worker processes (through :mod:`synapse_core.wire`): keep it
free of host imports.
"""

from __future__ import annotations

import enum
import math
import sys
from array import array
from collections.abc import Sequence

from .errors import WireError


class Kind(enum.Enum):
    """The kind of an output a worker computes for each input: what a row is.

    ``DENSE`` and ``SCORE`` rows have a fixed width (the vector's dims; one
    score); ``SPARSE`` and ``MULTI`` rows are ragged, their lengths carried
    per row (:class:`Output`), so that no row is ever cut to a width."""

    #: one vector of the worker's ``dims`` floats
    DENSE = "dense"
    #: one relevance score of a (query, document) pair
    SCORE = "score"
    #: (index, weight) entries, indices below the width (a vocabulary's size)
    SPARSE = "sparse"
    #: one vector of the width's floats per token (ColBERT, a last hidden state)
    MULTI = "multi"

    @property
    def ragged(self) -> bool:
        """Whether rows of this kind differ in length."""
        return self is Kind.SPARSE or self is Kind.MULTI


#: the one output of a task, for a peer that names none (protocol 2)
TASK_OUTPUT: dict[str, Kind] = {"embed": Kind.DENSE, "rerank": Kind.SCORE}


def check_part(
    kind: Kind, rows: int, dims: int, data: bytes, lengths: bytes, indices: bytes, bucket: int
) -> None:
    """Validate one output's layout (:class:`Output`) without unpacking its
    values: sizes, row lengths (a multi-vector row has at most ``bucket``
    token vectors: never more than the sequence had), sparse indices
    (below ``dims``, none twice in a row) and finiteness."""
    if not kind.ragged:
        if lengths or indices:
            raise WireError(f"a {kind.value} output carries row lengths or indices")
        expected = rows * dims * 4
        if len(data) != expected:
            raise WireError(
                f"{kind.value} output carries {len(data)} bytes; {rows} rows x {dims} dims "
                f"needs {expected}"
            )
    else:
        if len(lengths) != rows * 4:
            raise WireError(f"{kind.value} output has {len(lengths) // 4} row lengths for {rows}")
        counts = _uint32s(lengths)
        total = sum(counts)
        if kind is Kind.MULTI:
            if counts and max(counts) > bucket:
                raise WireError(f"a row of {max(counts)} token vectors exceeds bucket {bucket}")
            if indices:
                raise WireError("a multi-vector output carries indices")
        width = 1 if kind is Kind.SPARSE else dims
        if len(data) != total * width * 4:
            raise WireError(
                f"{kind.value} output carries {len(data)} bytes; {total} entries x {width} "
                f"needs {total * width * 4}"
            )
        if kind is Kind.SPARSE:
            _check_indices(counts, indices, dims)
    if not all_finite(data):
        raise WireError(f"{kind.value} output contains NaN or infinite values")


def _check_indices(counts: list[int], indices: bytes, bound: int) -> None:
    if len(indices) != sum(counts) * 4:
        raise WireError(f"sparse output has {len(indices) // 4} indices for {sum(counts)} values")
    values = _int32s(indices)
    if values and (min(values) < 0 or max(values) >= bound):
        raise WireError(f"a sparse index is outside 0..{bound - 1}")
    start = 0
    for count in counts:
        if len(set(values[start : start + count])) != count:
            raise WireError("a sparse row names an index twice")
        start += count


def all_finite(data: bytes) -> bool:
    """Whether little-endian float32 ``data`` holds no NaN and no infinity."""
    # A float32 is NaN or infinite only if its exponent bits are all ones, so
    # its high byte (the last, little-endian) is 0x7F or 0xFF; only then look
    # closer. A float32 sum in double precision cannot overflow, so a
    # non-finite sum means a NaN or infinity among the values.
    high = data[3::4]
    return not (b"\x7f" in high or b"\xff" in high) or math.isfinite(sum(floats_of(data)))


def part_rows(
    kind: Kind, rows: int, dims: int, data: bytes, lengths: bytes, indices: bytes
) -> list[object]:
    """The checked rows of one output: a fixed-width kind's rows of floats;
    a sparse row as ``(indices, values)``; a multi-vector row as a list of
    vectors."""
    values = floats_of(data)
    if not kind.ragged:
        return [values[i * dims : i * dims + dims] for i in range(rows)]
    counts = _uint32s(lengths)
    out: list[object] = []
    start = 0
    if kind is Kind.SPARSE:
        positions = _int32s(indices)
        for count in counts:
            out.append((positions[start : start + count], values[start : start + count]))
            start += count
        return out
    for count in counts:
        out.append([values[(start + t) * dims : (start + t + 1) * dims] for t in range(count)])
        start += count
    return out


def pack_ragged(counts: Sequence[int]) -> bytes:
    """Row lengths as little-endian uint32 bytes."""
    return _packed("I", counts)


def pack_indices(indices: Sequence[int]) -> bytes:
    """Sparse indices as little-endian int32 bytes."""
    return _packed("i", indices)


def _packed(code: str, values: Sequence[int]) -> bytes:
    flat = array(code, values)
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def _uint32s(data: bytes) -> list[int]:
    return _ints("I", data)


def _int32s(data: bytes) -> list[int]:
    return _ints("i", data)


def _ints(code: str, data: bytes) -> list[int]:
    flat = array(code, data)
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tolist()


def floats_of(data: bytes) -> list[float]:
    """Little-endian float32 ``data`` as Python floats."""
    if sys.byteorder == "little":
        return memoryview(data).cast("f").tolist()  # type: ignore[return-value]
    flat = array("f", data)
    flat.byteswap()
    return flat.tolist()
