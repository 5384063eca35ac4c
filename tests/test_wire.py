"""The worker wire protocol: frame round trips, row packing, size limits, garbage."""

from __future__ import annotations

import math
import struct

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synapse_core.errors import WireError
from synapse_core.wire import (
    PREFIX,
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    AnyFrame,
    Codec,
    Computed,
    Evict,
    Evicted,
    Failure,
    Frame,
    Hello,
    HostFrame,
    Infer,
    Inventory,
    InventoryRequest,
    Output,
    Shape,
    Shutdown,
    WorkerFrame,
    pack_rows,
    unpack_rows,
)

# msgpack carries integers in [-2**63, 2**64); frames never need more.
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
sizes = st.integers(min_value=0, max_value=2**32)
texts = st.text(max_size=40)
shapes = st.builds(Shape, bucket=sizes, batch=sizes)
token_lists = st.lists(st.integers(min_value=0, max_value=2**31), max_size=8)

FRAME_STRATEGIES: dict[type[Frame], st.SearchStrategy[Frame]] = {
    Hello: st.builds(
        Hello,
        protocol=ints,
        implementation=texts,
        version=texts,
        model=texts,
        package=texts,
        generation=ints,
        pid=ints,
        # A hello's buckets are checked on decoding: generate usable ones.
        buckets=st.lists(st.integers(1, 2**32), min_size=1, max_size=8, unique=True).map(sorted),
        dims=sizes,
        max_batch=sizes,
        identity=texts,
    ),
    Admitted: st.builds(Admitted, request_id=ints, shape=shapes, cold=st.booleans(), cost=ints),
    Output: st.builds(
        Output,
        request_id=ints,
        shape=shapes,
        rows=sizes,
        dims=sizes,
        data=st.binary(max_size=64),
        compute_ns=st.none() | sizes,
    ),
    Evicted: st.builds(Evicted, request_id=ints, shape=shapes),
    Inventory: st.builds(Inventory, request_id=ints, shapes=st.lists(shapes, max_size=6)),
    Failure: st.builds(Failure, request_id=ints, code=texts, message=texts),
    Computed: st.builds(Computed, request_id=ints),
    Admit: st.builds(Admit, request_id=ints, shape=shapes),
    Infer: st.builds(
        Infer,
        request_id=ints,
        shape=shapes,
        task=st.sampled_from(["embed", "rerank"]),
        sequences=st.lists(token_lists, max_size=6),
        query=st.none() | token_lists,
    ),
    Evict: st.builds(Evict, request_id=ints, shape=shapes),
    InventoryRequest: st.builds(InventoryRequest, request_id=ints),
    Shutdown: st.just(Shutdown()),
}

any_frame = st.one_of(*FRAME_STRATEGIES.values())


def test_every_frame_type_has_a_strategy() -> None:
    # A new frame type added to the protocol must be added to the round trips.
    declared = set(WorkerFrame.__args__) | set(HostFrame.__args__)
    assert declared == set(FRAME_STRATEGIES)


@pytest.mark.parametrize("frame_type", list(FRAME_STRATEGIES), ids=lambda t: t.__name__)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_frame_round_trips(frame_type: type[Frame], data: st.DataObject) -> None:
    frame = data.draw(FRAME_STRATEGIES[frame_type])
    codec = Codec()
    encoded = codec.encode(frame)
    (length,) = PREFIX.unpack(encoded[: PREFIX.size])
    assert length == len(encoded) - PREFIX.size
    assert codec.body_length(encoded[: PREFIX.size]) == length
    decoded = codec.decode(encoded[PREFIX.size :])
    assert type(decoded) is frame_type
    assert decoded == frame


def test_frames_carry_their_tag() -> None:
    body = Codec().encode(Admit(7, Shape(16, 2)))[PREFIX.size :]
    assert msgspec.msgpack.decode(body) == {"t": "admit", "request_id": 7, "shape": [16, 2]}


def test_missing_defaulted_fields_decode_for_older_peers() -> None:
    # An older worker that does not send ``cost`` still decodes.
    body = msgspec.msgpack.encode(
        {"t": "admitted", "request_id": 1, "shape": [16, 1], "cold": True}
    )
    assert Codec().decode(body) == Admitted(1, Shape(16, 1), True, 0)


def test_unknown_fields_from_newer_peers_are_ignored() -> None:
    body = msgspec.msgpack.encode({"t": "inventory_request", "request_id": 3, "later": [1, 2]})
    assert Codec().decode(body) == InventoryRequest(3)


class OlderOutput(Frame, tag="output", frozen=True):
    """An output as protocol 2 first had it: no ``compute_ns``."""

    request_id: int
    shape: Shape
    rows: int
    dims: int
    data: bytes


def test_an_outputs_compute_time_is_optional_both_ways() -> None:
    """A worker that does not report its compute time still decodes (``None``),
    and a host that does not know the field reads a reply that carries it."""
    older = msgspec.msgpack.encode(OlderOutput(1, Shape(16, 1), 1, 1, b"\0" * 4))
    assert Codec().decode(older) == Output(1, Shape(16, 1), 1, 1, b"\0" * 4, compute_ns=None)
    newer = Codec().encode(Output(1, Shape(16, 1), 1, 1, b"\0" * 4, compute_ns=1234))
    assert Codec(accepts=OlderOutput).decode(newer[PREFIX.size :]) == OlderOutput(
        1, Shape(16, 1), 1, 1, b"\0" * 4
    )


@pytest.mark.parametrize(
    ("buckets", "problem"),
    [
        ([], "a worker needs at least one bucket"),
        ([0], "bucket sizes must be greater than 0"),
        ([16, -1], "bucket sizes must be greater than 0"),
        ([16, 16], "a bucket is listed twice"),
        ([32, 16], "buckets must be in increasing order"),
    ],
)
def test_a_hello_with_unusable_buckets_does_not_decode(buckets: list[int], problem: str) -> None:
    fields = {
        "t": "hello", "protocol": PROTOCOL_VERSION, "implementation": "x", "version": "0",
        "model": "m", "package": "p", "generation": 1, "pid": 1, "buckets": buckets, "dims": 4,
        "max_batch": 1, "identity": "id",
    }  # fmt: skip
    with pytest.raises(WireError) as error:
        Codec(WorkerFrame).decode(msgspec.msgpack.encode(fields))
    assert str(error.value) == f"undecodable frame: hello buckets {buckets}: {problem}"
    with pytest.raises(ValueError, match=problem):  # nor can a worker build one
        Hello(PROTOCOL_VERSION, "x", "0", "m", "p", 1, 1, buckets, 4, 1, "id")


@pytest.mark.parametrize(
    ("accepts", "frame"),
    [
        (WorkerFrame, Admit(1, Shape(16, 1))),
        (WorkerFrame, Shutdown()),
        (HostFrame, Admitted(1, Shape(16, 1), cold=False)),
        (HostFrame, Hello(PROTOCOL_VERSION, "x", "0", "m", "p", 1, 1, [16], 4, 1, "id")),
    ],
    ids=["admit-to-host", "shutdown-to-host", "admitted-to-worker", "hello-to-worker"],
)
def test_a_frame_for_the_other_direction_is_refused(accepts: object, frame: Frame) -> None:
    body = Codec().encode(frame)[PREFIX.size :]
    with pytest.raises(WireError, match="undecodable frame"):
        Codec(accepts=accepts).decode(body)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\xc1",
        msgspec.msgpack.encode({"t": "no-such-frame"}),
        msgspec.msgpack.encode({"request_id": 1}),
        msgspec.msgpack.encode({"t": "admit", "request_id": "one", "shape": [16, 1]}),
        msgspec.msgpack.encode({"t": "admit", "request_id": 1, "shape": [16]}),
        msgspec.msgpack.encode(
            {"t": "infer", "request_id": 1, "shape": [16, 1], "task": "x", "sequences": []}
        ),
        msgspec.msgpack.encode([1, 2, 3]),
    ],
    ids=[
        "empty",
        "reserved-byte",
        "unknown-tag",
        "no-tag",
        "bad-type",
        "short-shape",
        "bad-task",
        "not-a-map",
    ],
)
def test_bad_bodies_raise_wire_error(body: bytes) -> None:
    with pytest.raises(WireError):
        Codec().decode(body)


def test_encode_refuses_a_frame_over_max_frame() -> None:
    frame = Output(1, Shape(16, 1), 1, 64, b"\0" * 256)
    fits = len(Codec().encode(frame)) - PREFIX.size
    assert len(Codec(max_frame=fits).encode(frame)) == fits + PREFIX.size
    with pytest.raises(WireError, match=f"exceeds the {fits - 1}-byte limit"):
        Codec(max_frame=fits - 1).encode(frame)


def test_encoder_is_reusable_after_refusing_a_frame() -> None:
    codec = Codec(max_frame=32)
    with pytest.raises(WireError):
        codec.encode(Output(1, Shape(16, 1), 1, 64, b"\0" * 256))
    small = codec.encode(Shutdown())
    assert codec.decode(small[PREFIX.size :]) == Shutdown()


def test_body_length_refuses_an_oversized_header() -> None:
    codec = Codec(max_frame=1000)
    assert codec.body_length(PREFIX.pack(1000)) == 1000
    assert codec.body_length(PREFIX.pack(0)) == 0
    with pytest.raises(WireError, match="announces 1001 bytes; limit is 1000"):
        codec.body_length(PREFIX.pack(1001))
    with pytest.raises(WireError):
        Codec().body_length(b"\xff\xff\xff\xff")


# -- rows ----------------------------------------------------------------------------

float32s = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=6).flatmap(
        lambda dims: st.lists(st.lists(float32s, min_size=dims, max_size=dims), max_size=6).map(
            lambda rows: (dims, rows)
        )
    )
)
def test_pack_and_unpack_rows_round_trip(case: tuple[int, list[list[float]]]) -> None:
    dims, rows = case
    data = pack_rows(rows)
    assert len(data) == len(rows) * dims * 4
    # float32 values survive exactly; little-endian regardless of the host.
    assert data == b"".join(struct.pack("<f", v) for row in rows for v in row)
    output = Output(1, Shape(16, max(len(rows), 1)), len(rows), dims, data)
    assert unpack_rows(output) == rows


def test_unpack_rows_survives_a_wire_round_trip() -> None:
    rows = [[0.5, -1.25, 3.0], [1e-3, 0.0, -0.0]]
    codec = Codec()
    frame = Output(9, Shape(16, 2), 2, 3, pack_rows(rows))
    decoded = codec.decode(codec.encode(frame)[PREFIX.size :])
    assert isinstance(decoded, Output)
    assert unpack_rows(decoded) == [
        [struct.unpack("<f", struct.pack("<f", v))[0] for v in r] for r in rows
    ]


@pytest.mark.parametrize(
    "delta", [-4, -1, 1, 4], ids=["row-short", "byte-short", "byte-long", "float-long"]
)
def test_unpack_rows_rejects_wrong_byte_counts(delta: int) -> None:
    data = pack_rows([[1.0, 2.0], [3.0, 4.0]])
    data = data[:delta] if delta < 0 else data + b"\0" * delta
    with pytest.raises(WireError, match="2 rows x 2 dims needs 16"):
        unpack_rows(Output(1, Shape(16, 2), 2, 2, data))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("position", [0, 3, 5])
def test_unpack_rows_rejects_non_finite_values(bad: float, position: int) -> None:
    values = [0.25] * 6
    values[position] = bad
    data = struct.pack("<6f", *values)
    with pytest.raises(WireError, match="NaN or infinite"):
        unpack_rows(Output(1, Shape(16, 2), 2, 3, data))


def test_unpack_rows_accepts_extreme_finite_values() -> None:
    big = struct.unpack("<f", struct.pack("<f", 3.4e38))[0]
    rows = [[big] * 4, [-big] * 4, [big, big, big, big]]
    assert unpack_rows(Output(1, Shape(16, 3), 3, 4, pack_rows(rows))) == rows


# -- garbage --------------------------------------------------------------------------


def _mutated_frames() -> st.SearchStrategy[bytes]:
    """Valid frame bodies with bytes flipped, cut or appended: near-misses."""

    def mutate(body: bytes, data: st.DataObject) -> bytes:
        if not body:
            return body
        choice = data.draw(st.sampled_from(["flip", "cut", "append"]))
        if choice == "cut":
            return body[: data.draw(st.integers(0, len(body) - 1))]
        if choice == "append":
            return body + data.draw(st.binary(min_size=1, max_size=8))
        i = data.draw(st.integers(0, len(body) - 1))
        return body[:i] + bytes([data.draw(st.integers(0, 255))]) + body[i + 1 :]

    return st.tuples(any_frame, st.data()).map(
        lambda fd: mutate(msgspec.msgpack.encode(fd[0]), fd[1])
    )


garbage_bodies = st.one_of(
    st.binary(max_size=256),
    _mutated_frames(),
    st.recursive(
        st.none() | st.booleans() | ints | st.floats() | texts | st.binary(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
        max_leaves=12,
    ).map(msgspec.msgpack.encode),
)


@pytest.mark.parametrize(
    "accepts", [AnyFrame, WorkerFrame, HostFrame], ids=["any", "worker", "host"]
)
@settings(max_examples=150, deadline=None)
@given(body=garbage_bodies)
def test_garbage_decodes_to_a_frame_or_wire_error(accepts: object, body: bytes) -> None:
    codec = Codec(accepts=accepts)
    try:
        frame = codec.decode(body)
    except WireError:
        return
    # Anything that decodes is a frame this side accepts, nothing else.
    assert isinstance(frame, accepts.__args__)  # type: ignore[attr-defined]
