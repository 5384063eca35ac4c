"""The mock worker on its own: outputs, refusals, inventory and options.

The kit's own behaviour (the shape rule, fault knobs, tracing) is tested in
the core's ``tests/test_worker_kit.py``; this checks the mock's model and its
options on top of it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from synapse_core import ConfigError, Hello
from synapse_core.plugin import Frame, Kind, LaunchSpec, Reply, Shape, WorkerLogic
from synapse_core.wire import PROTOCOL_VERSION, Admit, Admitted, Failure, Infer, Output, unpack_rows
from synapse_core.worker import build_logic
from synapse_mock_transport import Faults, MockOptions, parse_options
from synapse_mock_transport.logic import embed_tokens
from synapse_mock_transport.worker import IMPLEMENTATION, MockWorker


def logic(
    generation: int = 1, model: str = "m", package: str = "pkg", pid: int = 1234, **options: Any
) -> WorkerLogic:
    spec = LaunchSpec(model, package, f"{model}#1", generation, options)
    return build_logic(MockWorker, spec, pid=pid)


def reply(action: object) -> Frame:
    assert isinstance(action, Reply), action
    return action.frame


def admitted(worker: WorkerLogic, bucket: int = 16, batch: int = 4, rid: int = 1) -> Frame:
    return reply(worker.handle(Admit(rid, Shape(bucket, batch))))


WIDE = Shape(16, 8)


def ready(worker: WorkerLogic) -> WorkerLogic:
    """``worker`` with the shape :data:`WIDE` admitted."""
    admitted(worker, WIDE.bucket, WIDE.batch)
    return worker


def embed(worker: WorkerLogic, sequences: list[list[int]], shape: Shape = WIDE) -> Frame:
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
        outputs={Kind.DENSE: 8, Kind.SCORE: 1},
    )
    assert hello.version


def test_admit_is_cold_once_then_warm_and_costs_bucket_times_batch() -> None:
    worker = logic()
    assert admitted(worker, 32, 2, rid=1) == Admitted(1, Shape(32, 2), cold=True, cost=64)
    assert admitted(worker, 32, 2, rid=2) == Admitted(2, Shape(32, 2), cold=False, cost=64)


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
    a = logic(model="a", package="p", pid=1)
    b = logic(7, model="b", package="q", pid=2)
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


# -- options ------------------------------------------------------------------------


def test_default_options() -> None:
    options = parse_options({})
    assert options == MockOptions()
    assert options.faults == Faults()
    assert not options.faults.active(1)


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


@pytest.mark.parametrize("buckets", [[], [16, 0], [8, 8]], ids=["empty", "zero", "twice"])
def test_bad_buckets_say_what_is_wrong(buckets: list[int]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options({"buckets": buckets})
    assert any("buckets" in p for p in info.value.problems)
