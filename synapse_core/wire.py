"""The worker wire protocol: MessagePack frames behind a 4-byte length prefix.

Every frame is a tagged :class:`msgspec.Struct`; the tag travels in the ``t``
field. New fields must get defaults so older peers keep decoding (msgspec
schema evolution). Rows of floats travel as packed little-endian ``float32``
bytes, not as lists, because per-float encoding dominates large replies.

This module is imported by worker processes: keep it free of host imports.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

from .errors import WireError, WorkerRejected
from .kinds import TASK_OUTPUT as TASK_OUTPUT
from .kinds import Kind as Kind
from .kinds import all_finite as all_finite
from .kinds import check_part, floats_of, part_rows

#: 2: workers may send :class:`Computed` before a reply;
#: 3: typed outputs (:class:`Kind`): ``Hello.outputs``, ``Infer.outputs``,
#: ``Output.kind`` / ``lengths`` / ``indices`` / ``more`` (a peer of 2 sends
#: and reads none of them, and serves the dense or score output of its task).
#: (An :class:`Output`'s ``compute_ns`` needs no version: a field with a
#: default is ignored by a peer that does not know it.)
PROTOCOL_VERSION = 3
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
    #: the outputs the worker computes and each one's width (dims for dense
    #: and multi, 1 for a score, the index bound for sparse); empty: a peer
    #: of protocol 2, whose output is its task's (:func:`widths_of`)
    outputs: dict[Kind, int] = {}

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


class Part(msgspec.Struct, frozen=True, array_like=True):
    """One further output of an :class:`Output` (``Output.more``), laid out
    as the output's own fields are."""

    kind: Kind
    dims: int
    data: bytes
    lengths: bytes = b""
    indices: bytes = b""


class Output(Frame, tag="output", frozen=True):
    """A worker's rows for one :class:`Infer`, one output per kind asked for.

    A fixed-width kind's ``data`` is ``rows * dims`` little-endian float32.
    A ragged kind has ``lengths``, one little-endian uint32 per row (the
    row's entries: sparse pairs, or token vectors), and ``data`` holds
    ``sum(lengths)`` entries of ``dims`` floats (``dims`` is 1 for sparse,
    whose ``indices`` hold one little-endian int32 per entry, below the
    width)."""

    request_id: int
    shape: Shape
    rows: int
    dims: int
    data: bytes  # rows * dims little-endian float32 (fixed-width kinds)
    #: the kind of this output; ``None``: a peer of protocol 2, the kind asked for
    kind: Kind | None = None
    lengths: bytes = b""
    indices: bytes = b""
    #: the outputs asked for after the first, in the order asked
    more: list[Part] = []
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
    #: the outputs asked for, in order; empty: the task's own (``TASK_OUTPUT``)
    outputs: list[Kind] = []


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


def widths_of(hello: Hello) -> Mapping[Kind, int]:
    """The outputs ``hello``'s worker computes, with their widths; a peer of
    protocol 2 names none, and computes its task's (dense vectors of its
    dims, or scores)."""
    return hello.outputs or {Kind.DENSE: hello.dims, Kind.SCORE: 1}


def asked_of(request: Infer) -> list[Kind]:
    """The outputs ``request`` asks for, in order."""
    return request.outputs or [TASK_OUTPUT[request.task]]


def rows_of(output: Output) -> list[list[float]]:
    """The rows of the first output of an :class:`Output` that passed
    :func:`check_rows` (a fixed-width kind) or :func:`expect_output`; a
    ragged kind's rows are as :func:`part_rows` gives them."""
    kind = output.kind
    if kind is not None and kind.ragged:
        return part_rows(
            kind, output.rows, output.dims, output.data, output.lengths, output.indices
        )  # type: ignore[return-value]
    values = floats_of(output.data)
    if output.rows == 1:
        return [values]
    d = output.dims
    return [values[i * d : i * d + d] for i in range(output.rows)]


def unpack_rows(output: Output) -> list[list[float]]:
    """Validate and unpack an :class:`Output`'s rows."""
    check_rows(output)
    return rows_of(output)


def more_rows(output: Output) -> list[list[object]]:
    """The rows of each further output (``Output.more``), in the order asked."""
    return [
        part_rows(p.kind, output.rows, p.dims, p.data, p.lengths, p.indices) for p in output.more
    ]


def expect_output(
    reply: Frame, request: Infer, rows: int, width: int, widths: Sequence[int] = ()
) -> Output:
    """``reply`` if it is the checked :class:`Output` of ``request`` with
    ``rows`` rows of each output asked for (:func:`asked_of`), the first of
    ``width`` and the others of ``widths`` in order; else
    :class:`WorkerRejected` (a :class:`WorkerFault`) for a failure the
    worker reported, :class:`WireError` for anything else."""
    if (
        type(reply) is Output
        and reply.request_id == request.request_id
        and reply.shape == request.shape
        and reply.rows == rows
        and reply.dims == width
        and not request.outputs
        and reply.kind is None
        and not reply.more
    ):
        check_rows(reply)  # a task's own output from a peer of protocol 2
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
    _check_kinds(reply, request, width, widths)
    return reply


def _check_kinds(reply: Output, request: Infer, width: int, widths: Sequence[int]) -> None:
    asked = asked_of(request)
    kind = reply.kind if reply.kind is not None else asked[0]
    sent = [(kind, reply.dims), *((p.kind, p.dims) for p in reply.more)]
    expected = list(zip(asked, [width, *widths], strict=False))
    if sent != expected:
        names = [(k.value, d) for k, d in sent]
        raise WireError(
            f"reply has outputs {names}, expected {[(k.value, d) for k, d in expected]}"
        )
    bucket = request.shape.bucket
    check_part(kind, reply.rows, reply.dims, reply.data, reply.lengths, reply.indices, bucket)
    for p in reply.more:
        check_part(p.kind, reply.rows, p.dims, p.data, p.lengths, p.indices, bucket)
