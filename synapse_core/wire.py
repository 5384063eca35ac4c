"""The worker wire protocol: MessagePack frames behind a 4-byte length prefix.

Every frame is a tagged :class:`msgspec.Struct`; the tag travels in the ``t``
field. New fields must get defaults so older peers keep decoding (msgspec
schema evolution). Rows of floats travel as packed little-endian ``float32``
bytes, not as lists, because per-float encoding dominates large replies.

This module is imported by worker processes: keep it free of host imports.
"""

from __future__ import annotations

import math
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import Literal

import msgspec

from .errors import WireError, WorkerRejected

#: 2: workers may send :class:`Computed` before a reply. (An :class:`Output`'s
#: ``compute_ns``, added since, needs no new version: a field with a default
#: is ignored by a peer that does not know it, and absent from one that does not send it.)
PROTOCOL_VERSION = 2
PREFIX = struct.Struct(">I")
DEFAULT_MAX_FRAME = 64 * 1024 * 1024
#: the largest batch a worker may report in its hello: the most inputs one
#: request carries (a batch of 2**40 is a worker's bug, not its capacity)
MAX_BATCH = 65536

Task = Literal["embed", "rerank"]


class Frame(msgspec.Struct, tag_field="t", frozen=True, forbid_unknown_fields=False):
    """Base of every frame."""


class Shape(msgspec.Struct, frozen=True, array_like=True, forbid_unknown_fields=True):
    """A compiled program size: sequence bucket (tokens) and batch rows.

    A third element is refused, not dropped: a shape is compared for
    identity everywhere (reservations, inventories, certification)."""

    bucket: int
    batch: int


# -- worker -> host -------------------------------------------------------


class Hello(Frame, tag="hello", frozen=True):
    protocol: int
    implementation: str
    version: str
    model: str
    package: str
    generation: int
    pid: int
    buckets: list[int]
    dims: int
    max_batch: int
    identity: str

    def __post_init__(self) -> None:
        # Checked on decoding: a hello with unusable buckets is a start-up fault.
        problem = bucket_problem(self.buckets)
        if problem:
            raise ValueError(f"hello buckets {self.buckets}: {problem}")


class Admitted(Frame, tag="admitted", frozen=True):
    request_id: int
    shape: Shape
    cold: bool
    cost: int = 0


class Output(Frame, tag="output", frozen=True):
    request_id: int
    shape: Shape
    rows: int
    dims: int
    data: bytes  # rows * dims little-endian float32
    #: how long the worker's model computed these rows, as the worker measured
    #: it (nanoseconds); ``None``: not reported (a worker without the kit)
    compute_ns: int | None = None


class Evicted(Frame, tag="evicted", frozen=True):
    request_id: int
    shape: Shape


class Inventory(Frame, tag="inventory", frozen=True):
    request_id: int
    shapes: list[Shape]


class Failure(Frame, tag="failure", frozen=True):
    request_id: int
    code: str
    message: str


# -- host -> worker -------------------------------------------------------


class Admit(Frame, tag="admit", frozen=True):
    request_id: int
    shape: Shape


class Infer(Frame, tag="infer", frozen=True):
    request_id: int
    shape: Shape
    task: Task
    sequences: list[list[int]]
    query: list[int] | None = None


class Evict(Frame, tag="evict", frozen=True):
    request_id: int
    shape: Shape


class InventoryRequest(Frame, tag="inventory_request", frozen=True):
    request_id: int


class Shutdown(Frame, tag="shutdown", frozen=True):
    pass


class LaunchSpec(msgspec.Struct, frozen=True):
    """What a worker process is told on its command line (``--spec JSON``)."""

    model: str
    package: str
    worker_id: str
    generation: int
    options: dict[str, object] = {}
    #: the host's process id: the worker exits soon after that process is gone
    host_pid: int | None = None


class Computed(Frame, tag="computed", frozen=True):
    """A worker's notice that the computation of ``request_id`` has ended and
    its reply (rows, or a failure) follows. The worker kit sends it after a computation long enough
    for the host to have gone to sleep, before it packs and writes the
    reply, so the host's wake-up overlaps that work; the host drops it. A
    worker need never send one."""

    request_id: int


WorkerFrame = Hello | Admitted | Output | Evicted | Inventory | Failure | Computed
HostFrame = Admit | Infer | Evict | InventoryRequest | Shutdown
AnyFrame = WorkerFrame | HostFrame


class Codec:
    """One reusable encoder and one typed decoder, as msgspec recommends."""

    def __init__(self, accepts: object = AnyFrame, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder: msgspec.msgpack.Decoder[Frame] = msgspec.msgpack.Decoder(accepts)

    def encode(self, frame: Frame) -> bytes:
        """Length prefix plus body, in one buffer."""
        buf = bytearray(PREFIX.size)
        self._encoder.encode_into(frame, buf, PREFIX.size)
        body = len(buf) - PREFIX.size
        if body > self.max_frame:
            raise WireError(f"frame of {body} bytes exceeds the {self.max_frame}-byte limit")
        PREFIX.pack_into(buf, 0, body)
        return bytes(buf)

    def body_length(self, prefix: bytes | bytearray) -> int:
        (length,) = PREFIX.unpack(prefix)
        if length > self.max_frame:
            raise WireError(f"frame header announces {length} bytes; limit is {self.max_frame}")
        return int(length)

    def decode(self, body: bytes | memoryview) -> Frame:
        try:
            return self._decoder.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise WireError(f"undecodable frame: {exc}") from None


_TEXT = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}


def stray_text(data: bytes | bytearray, limit: int = 60) -> str | None:
    """What to report when a frame header reads as text (a worker printed to
    its stdout), or ``None`` when it does not."""
    head = data[: PREFIX.size]
    if len(head) < PREFIX.size or not all(b in _TEXT for b in head):
        return None
    more = "…" if len(data) > limit else ""
    return f"worker wrote to stdout: {bytes(data[:limit])!r}{more}"


def bucket_problem(buckets: Sequence[int]) -> str:
    """Why ``buckets`` cannot be a worker's buckets, or ``""``: they must be
    positive sizes in increasing order, none listed twice, at least one."""
    if not buckets:
        return "a worker needs at least one bucket"
    if any(b <= 0 for b in buckets):
        return "bucket sizes must be greater than 0"
    if len(set(buckets)) != len(buckets):
        return "a bucket is listed twice"
    if list(buckets) != sorted(buckets):
        return "buckets must be in increasing order"
    return ""


def pack_rows(rows: Sequence[Sequence[float]]) -> bytes:
    """Pack float rows as little-endian float32 bytes."""
    flat = array("f", [v for row in rows for v in row])
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def check_rows(output: Output) -> None:
    """Validate an :class:`Output`'s rows without unpacking them: size and finiteness."""
    expected = output.rows * output.dims * 4
    data = output.data
    if len(data) != expected:
        raise WireError(
            f"output carries {len(data)} bytes; {output.rows} rows x {output.dims} dims "
            f"needs {expected}"
        )
    if not all_finite(data):
        raise WireError("output contains NaN or infinite values")


def all_finite(data: bytes) -> bool:
    """Whether little-endian float32 ``data`` holds no NaN and no infinity."""
    # A float32 is NaN or infinite only if its exponent bits are all ones, so
    # its high byte (the last, little-endian) is 0x7F or 0xFF; only then look
    # closer. A float32 sum in double precision cannot overflow, so a
    # non-finite sum means a NaN or infinity among the values.
    high = data[3::4]
    return not (b"\x7f" in high or b"\xff" in high) or math.isfinite(sum(_floats(data)))


def rows_of(output: Output) -> list[list[float]]:
    """The rows of an :class:`Output` that passed :func:`check_rows`."""
    values = _floats(output.data)
    if output.rows == 1:
        return [values]
    d = output.dims
    return [values[i * d : i * d + d] for i in range(output.rows)]


def unpack_rows(output: Output) -> list[list[float]]:
    """Validate and unpack an :class:`Output`'s rows."""
    check_rows(output)
    return rows_of(output)


def _floats(data: bytes) -> list[float]:
    if sys.byteorder == "little":
        return memoryview(data).cast("f").tolist()  # type: ignore[return-value]
    flat = array("f", data)
    flat.byteswap()
    return flat.tolist()


def expect_output(reply: Frame, request: Infer, rows: int, width: int) -> Output:
    """``reply`` if it is the checked :class:`Output` of ``request`` with
    ``rows`` rows of ``width`` values; else :class:`WorkerRejected` (a
    :class:`WorkerFault`) for a failure the worker reported,
    :class:`WireError` for anything else."""
    if (
        type(reply) is Output
        and reply.request_id == request.request_id
        and reply.shape == request.shape
        and reply.rows == rows
        and reply.dims == width
    ):
        check_rows(reply)
        return reply
    # Not the reply expected: say exactly how.
    if isinstance(reply, Failure) and reply.request_id == request.request_id:
        raise WorkerRejected(f"worker rejected the request: {reply.code}: {reply.message}")
    if not isinstance(reply, Output):
        raise WireError(f"expected output, got {type(reply).__name__}")
    if reply.request_id != request.request_id:
        raise WireError(f"reply is for request {reply.request_id}, expected {request.request_id}")
    if reply.shape != request.shape:
        raise WireError(f"reply shape {reply.shape} differs from request shape {request.shape}")
    if reply.rows != rows or reply.dims != width:
        raise WireError(f"reply has {reply.rows}x{reply.dims} values, expected {rows}x{width}")
    check_rows(reply)
    return reply
