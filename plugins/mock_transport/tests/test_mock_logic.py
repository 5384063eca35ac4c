"""MockLogic on its own: outputs, refusals, inventory, options and fault decisions."""

from __future__ import annotations

import math
from typing import Any

import pytest

from synapse_core.errors import ConfigError
from synapse_core.wire import (
    PREFIX,
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Codec,
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
    WireError,
    WorkerFrame,
    unpack_rows,
)
from synapse_core.worker_kit import Crash, Hang, RawReply, Reply, Stop
from synapse_mock_transport import Faults, MockOptions, parse_options
from synapse_mock_transport.logic import IMPLEMENTATION, MALFORMED, MockLogic, embed_tokens


def logic(generation: int = 1, **options: Any) -> MockLogic:
    return MockLogic(
        model="m",
        package="pkg",
        generation=generation,
        options=parse_options(options),
        pid=1234,
    )


def reply(action: object) -> Frame:
    assert isinstance(action, Reply), action
    return action.frame


def admitted(worker: MockLogic, bucket: int = 16, batch: int = 4, rid: int = 1) -> Frame:
    return reply(worker.handle(Admit(rid, Shape(bucket, batch))))


WIDE = Shape(16, 8)


def ready(worker: MockLogic) -> MockLogic:
    """``worker`` with the shape :data:`WIDE` admitted."""
    admitted(worker, WIDE.bucket, WIDE.batch)
    return worker


def embed(worker: MockLogic, sequences: list[list[int]], shape: Shape = WIDE) -> Frame:
    return reply(worker.handle(Infer(9, shape, "embed", sequences)))


def rows(frame: Frame) -> list[list[float]]:
    assert isinstance(frame, Output), frame
    return unpack_rows(frame)


def test_hello_describes_the_worker() -> None:
    hello = logic(generation=3, buckets=[64, 16, 32], dims=8, max_batch=5).hello()
    assert hello == Hello(
        protocol=PROTOCOL_VERSION,
        implementation=IMPLEMENTATION,
        version=hello.version,
        model="m",
        package="pkg",
        generation=3,
        pid=1234,
        buckets=[16, 32, 64],
        dims=8,
        max_batch=5,
        identity="mock:pkg:d8:v1",
    )
    assert hello.version


def test_admit_is_cold_once_then_warm_and_costs_bucket_times_batch() -> None:
    worker = logic()
    assert admitted(worker, 32, 2, rid=1) == Admitted(1, Shape(32, 2), cold=True, cost=64)
    assert admitted(worker, 32, 2, rid=2) == Admitted(2, Shape(32, 2), cold=False, cost=64)
    assert worker.admits == 2


@pytest.mark.parametrize(
    "shape",
    [Shape(17, 1), Shape(16, 0), Shape(16, 33), Shape(16, -1)],
    ids=["unknown-bucket", "zero-batch", "over-max-batch", "negative-batch"],
)
def test_admit_refuses_a_shape_it_cannot_compile(shape: Shape) -> None:
    worker = logic()
    frame = reply(worker.handle(Admit(4, shape)))
    assert isinstance(frame, Failure)
    assert (frame.request_id, frame.code) == (4, "bad-shape")
    assert worker.shapes == set()


def test_embeddings_are_deterministic_and_normalised() -> None:
    sequences = [[5, 6, 7], [5, 6, 7], [7, 6, 5], [100, 200], []]
    first = rows(embed(ready(logic()), sequences))
    second = rows(embed(ready(logic()), sequences))
    assert first == second
    assert len(first) == 5 and all(len(r) == 64 for r in first)
    for row in first:
        assert math.isclose(math.fsum(v * v for v in row), 1.0, rel_tol=1e-5)
    # Same tokens, same vector (order does not matter to feature hashing).
    assert first[0] == first[1] == first[2]
    assert first[0] != first[3]
    # An empty sequence still gets a unit vector.
    assert first[4][0] == 1.0 and not any(first[4][1:])


def test_embeddings_do_not_depend_on_model_or_generation() -> None:
    a = MockLogic(model="a", package="p", generation=1, options=MockOptions(), pid=1)
    b = MockLogic(model="b", package="q", generation=7, options=MockOptions(), pid=2)
    out = [rows(embed(ready(w), [[11, 12]])) for w in (a, b)]
    assert out[0] == out[1]


def test_dims_option_sets_the_row_width() -> None:
    frame = embed(ready(logic(dims=5)), [[1], [2]])
    assert isinstance(frame, Output)
    assert (frame.rows, frame.dims) == (2, 5)
    assert rows(frame) == [
        pytest.approx(embed_tokens([1], 5), rel=1e-6),
        pytest.approx(embed_tokens([2], 5), rel=1e-6),
    ]


def test_rerank_scores_are_the_dot_product_with_the_query() -> None:
    worker = ready(logic())
    query, docs = [3, 4, 5], [[3, 4, 5], [9, 10], [3, 4]]
    frame = reply(worker.handle(Infer(2, WIDE, "rerank", docs, query)))
    assert isinstance(frame, Output)
    assert (frame.request_id, frame.rows, frame.dims) == (2, 3, 1)
    scores = [r[0] for r in rows(frame)]
    q = embed_tokens(query, 64)
    expected = [sum(a * b for a, b in zip(q, embed_tokens(d, 64), strict=True)) for d in docs]
    assert scores == pytest.approx(expected, abs=1e-6)
    # The document equal to the query scores highest, at 1.
    assert scores[0] == pytest.approx(1.0, abs=1e-6)
    assert max(scores) == scores[0]


@pytest.mark.parametrize(
    ("shape", "sequences", "problem"),
    [
        (Shape(32, 4), [[1]], "is not admitted"),
        (Shape(16, 4), [[1]] * 5, "5 sequences exceed batch 4"),
        (Shape(16, 4), [[1], list(range(17))], "a sequence exceeds bucket 16"),
    ],
    ids=["unadmitted-shape", "oversized-batch", "oversized-sequence"],
)
def test_infer_refuses_what_the_shape_cannot_hold(
    shape: Shape, sequences: list[list[int]], problem: str
) -> None:
    worker = logic()
    admitted(worker, 16, 4)
    frame = reply(worker.handle(Infer(6, shape, "embed", sequences)))
    assert isinstance(frame, Failure)
    assert (frame.request_id, frame.code) == (6, "bad-request")
    assert problem in frame.message
    assert worker.infers == 1


def test_a_sequence_exactly_filling_the_shape_is_served() -> None:
    worker = logic()
    admitted(worker, 16, 2)
    frame = embed(worker, [list(range(16))] * 2, Shape(16, 2))
    assert isinstance(frame, Output) and frame.rows == 2


def test_inventory_lists_admitted_shapes_sorted_and_evict_removes() -> None:
    worker = logic()
    assert reply(worker.handle(InventoryRequest(1))) == Inventory(1, [])
    for bucket, batch in [(64, 1), (16, 4), (16, 2), (32, 1)]:
        admitted(worker, bucket, batch)
    assert reply(worker.handle(InventoryRequest(2))) == Inventory(
        2, [Shape(16, 2), Shape(16, 4), Shape(32, 1), Shape(64, 1)]
    )
    assert reply(worker.handle(Evict(3, Shape(16, 4)))) == Evicted(3, Shape(16, 4))
    # Evicting a shape that is not admitted is harmless.
    assert reply(worker.handle(Evict(4, Shape(128, 1)))) == Evicted(4, Shape(128, 1))
    assert reply(worker.handle(InventoryRequest(5))) == Inventory(
        5, [Shape(16, 2), Shape(32, 1), Shape(64, 1)]
    )
    # An evicted shape is cold again.
    again = admitted(worker, 16, 4)
    assert isinstance(again, Admitted) and again.cold


def test_shutdown_stops_and_unexpected_frames_fail() -> None:
    worker = logic()
    assert worker.handle(Shutdown()) == Stop()
    frame = reply(worker.handle(Admitted(1, Shape(16, 1), cold=True)))
    assert isinstance(frame, Failure) and frame.code == "unexpected-frame"


def test_the_malformed_reply_does_not_decode() -> None:
    assert PREFIX.unpack(MALFORMED[: PREFIX.size]) == (len(MALFORMED) - PREFIX.size,)
    with pytest.raises(WireError):
        Codec(WorkerFrame).decode(MALFORMED[PREFIX.size :])


# -- fault decisions (what the worker loops then act on) --------------------------------


def test_crash_on_infer_counts_infers() -> None:
    worker = ready(logic(faults={"crash_on_infer": 2}))
    assert isinstance(embed(worker, [[1]]), Output)
    assert worker.handle(Infer(2, WIDE, "embed", [[1]])) == Crash()


def test_hang_and_malformed_on_infer() -> None:
    worker = ready(logic(faults={"hang_on_infer": 1, "malformed_on_infer": 2}))
    assert worker.handle(Infer(1, WIDE, "embed", [[1]])) == Hang()
    action = worker.handle(Infer(2, WIDE, "embed", [[1]]))
    assert action == RawReply(MALFORMED, 0.0)
    assert isinstance(embed(worker, [[1]]), Output)


def test_crash_on_admit_counts_admits() -> None:
    worker = logic(faults={"crash_on_admit": 2})
    assert isinstance(admitted(worker), Admitted)
    assert worker.handle(Admit(2, Shape(16, 4))) == Crash()


def test_delays_ride_on_the_reply() -> None:
    worker = logic(faults={"reply_delay_s": 0.25, "cold_admit_delay_s": 1.5})
    cold = worker.handle(Admit(1, Shape(16, 4)))
    warm = worker.handle(Admit(2, Shape(16, 4)))
    inventory = worker.handle(InventoryRequest(3))
    assert isinstance(cold, Reply) and cold.delay_s == pytest.approx(1.75)
    assert isinstance(warm, Reply) and warm.delay_s == pytest.approx(0.25)
    assert isinstance(inventory, Reply) and inventory.delay_s == pytest.approx(0.25)


def test_only_generation_limits_faults_to_that_generation() -> None:
    faults = {"crash_on_infer": 1, "ignore_sigterm": True, "only_generation": 2}
    for generation, faulty in [(1, False), (2, True), (3, False)]:
        worker = ready(logic(generation=generation, faults=faults))
        assert worker.ignore_sigterm is faulty
        action = worker.handle(Infer(1, WIDE, "embed", [[1]]))
        assert (action == Crash()) is faulty


def test_trace_sink_records_every_frame_in_order() -> None:
    records: list[dict[str, object]] = []
    worker = MockLogic(
        model="m",
        package="p",
        generation=4,
        options=MockOptions(),
        pid=77,
        trace_sink=records.append,
    )
    worker.hello()
    worker.handle(Admit(1, Shape(16, 2)))
    worker.handle(Infer(2, Shape(16, 2), "embed", [[1]]))
    worker.handle(InventoryRequest(3))
    worker.handle(Evict(4, Shape(16, 2)))
    worker.handle(Shutdown())
    assert [r["frame"] for r in records] == [
        "hello",
        "admit",
        "infer",
        "inventory",
        "evict",
        "shutdown",
    ]
    assert records[2] == {
        "pid": 77,
        "model": "m",
        "generation": 4,
        "frame": "infer",
        "shape": [16, 2],
        "request_id": 2,
    }


# -- options ------------------------------------------------------------------------


def test_default_options() -> None:
    options = parse_options({})
    assert options == MockOptions()
    assert options.faults == Faults()
    assert all(options.faults.active(g) for g in (1, 2, 99))


def test_options_are_structured() -> None:
    options = parse_options(
        {"buckets": [8, 4], "dims": 3, "faults": {"hang_on_infer": 2}, "trace": "t.jsonl"}
    )
    assert options.buckets == (8, 4)
    assert options.dims == 3
    assert options.faults.hang_on_infer == 2
    assert options.trace == "t.jsonl"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (
            {"faults": {"crash_on_infer": "x"}},
            "options.faults.crash_on_infer: expected int, got 'x'",
        ),
        ({"faults": {"reply_delay": 1}}, "options.faults: extra fields found (reply_delay)"),
        ({"dims": "wide"}, "options.dims: expected int, got 'wide'"),
        ({"colour": 1}, "options: extra fields found (colour)"),
    ],
)
def test_option_errors_name_their_path(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(options, source="model 'm'")
    assert info.value.source == "model 'm'"
    assert info.value.problems == [problem]


@pytest.mark.parametrize("buckets", [[], [16, 0]], ids=["empty", "zero"])
def test_bad_buckets_say_what_is_wrong(buckets: list[int]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"buckets": buckets})
    assert any("buckets" in p for p in info.value.problems)
