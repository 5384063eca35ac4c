"""The weight file a program's ``BLOBFILE(path, offset)`` constants point into.

Core ML's blob storage, version 2, as public Neural Engine projects build it
(maderix/ANE's ``mil_build_weight_blob``): a 64-byte file header (uint32
blob count, uint32 version 2), then per blob a 64-byte metadata record
(uint32 sentinel ``0xDEADBEEF``, uint32 data type, uint64 data size, uint64
absolute data offset) followed by the data, each record 64-byte aligned. A
``BLOBFILE`` offset is the offset of a blob's metadata record.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from .program import DType

ALIGN = 64
VERSION = 2
SENTINEL = 0xDEADBEEF
#: Core ML blob data types (uint32 in each metadata record).
TYPE_CODES: dict[DType, int] = {"fp16": 1, "fp32": 2}
NUMPY: dict[DType, type[np.floating[Any]]] = {"fp16": np.float16, "fp32": np.float32}
_HEADER = struct.Struct("<II")
_METADATA = struct.Struct("<IIQQ")


class BlobError(ValueError):
    """A weight file that does not hold what a program says it holds."""


def _little(dtype: DType) -> np.dtype[Any]:
    return np.dtype(NUMPY[dtype]).newbyteorder("<")


def itemsize(dtype: DType) -> int:
    return 2 if dtype == "fp16" else 4


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def after(offset: int, size: int) -> int:
    """Where the blob after one of ``size`` bytes at metadata ``offset`` starts."""
    return _aligned(offset + ALIGN + size)


def build(entries: Iterable[tuple[int, npt.NDArray[Any]]], dtype: DType) -> bytes:
    """The file for ``(offset, array)`` entries, each right :func:`after` the last."""
    items = list(entries)
    out = bytearray(_HEADER.pack(len(items), VERSION).ljust(ALIGN, b"\0"))
    for offset, array in items:
        if offset != len(out):
            raise BlobError(f"blob at {offset} does not follow the layout (file is {len(out)})")
        data = np.ascontiguousarray(array, dtype=_little(dtype)).tobytes()
        record = _METADATA.pack(SENTINEL, TYPE_CODES[dtype], len(data), offset + ALIGN)
        out += record.ljust(ALIGN, b"\0") + data
        out += b"\0" * (_aligned(len(out)) - len(out))
    return bytes(out)


def reader(data: bytes | memoryview) -> Callable[[int, DType, tuple[int, ...]], npt.NDArray[Any]]:
    """A function reading the array of ``shape`` and ``dtype`` at a metadata offset."""
    if len(data) < ALIGN or _HEADER.unpack_from(data, 0)[1] != VERSION:
        raise BlobError("weight file has no version-2 blob header")

    def read(offset: int, dtype: DType, shape: tuple[int, ...]) -> npt.NDArray[Any]:
        if offset % ALIGN or offset + ALIGN > len(data):
            raise BlobError(f"BLOBFILE offset {offset} is not a metadata record of the file")
        sentinel, code, size, start = _METADATA.unpack_from(data, offset)
        if sentinel != SENTINEL:
            raise BlobError(f"BLOBFILE offset {offset}: no blob sentinel there")
        if code != TYPE_CODES[dtype]:
            raise BlobError(f"BLOBFILE offset {offset}: data type {code}, program says {dtype}")
        count = int(np.prod(shape, dtype=np.int64))
        if size != count * itemsize(dtype) or start + size > len(data):
            raise BlobError(
                f"BLOBFILE offset {offset}: {size} bytes stored, shape {list(shape)} of {dtype} "
                f"needs {count * itemsize(dtype)}"
            )
        return np.frombuffer(data, _little(dtype), count, start).reshape(shape)

    return read
