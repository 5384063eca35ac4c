"""The worker kit on its own: ModelWorker bookkeeping, the shape rule, packing,
failures, fault knobs and tracing (no process, no plugin)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import attrs
import pytest

from synapse_core.errors import ConfigError
from synapse_core.plugin import (
    Crash,
    Declined,
    Faults,
    Hang,
    ModelWorker,
    RawReply,
    Reply,
    Stop,
    WorkerOptions,
    bucket_sizes,
    parse_options,
)
from synapse_core.wire import (
    PROTOCOL_VERSION,
    Admit,
    Admitted,
    Computed,
    Evict,
    Evicted,
    Failure,
    Frame,
    Hello,
    Infer,
    Inventory,
    InventoryRequest,
    Kind,
    LaunchSpec,
    Output,
    Shape,
    Shutdown,
    unpack_rows,
)
from synapse_core.worker import MALFORMED, WorkerLogic, build_logic

S = Shape(16, 4)


@attrs.frozen
class SumOptions(WorkerOptions):
    buckets: tuple[int, ...] = attrs.field(default=(32, 16), validator=bucket_sizes)


class SumWorker(ModelWorker):
    options_type = SumOptions
    implementation = "synapse-sum"
    version = "1.2"
    dims = 2
    max_batch = 4

    def load(self, options: SumOptions) -> None:
        self.buckets = options.buckets
        self.identity = f"sum:{self.package}:v1"
        self.events: list[str] = []

    def embed(self, batch: list[list[int]]) -> Any:
        self.events.append(f"embed {self.shape.bucket}x{self.shape.batch}")
        if batch and batch[0] == [666]:
            raise Declined("the number of the beast", "bad-number")
        if batch and batch[0] == [0]:
            return [[0.0, 0.0]] * (len(batch) + 1)
        if batch and batch[0] == [13]:
            raise ZeroDivisionError("unlucky")
        return [[float(len(s)), float(sum(s))] for s in batch]

    def rerank(self, query: list[int], batch: list[list[int]]) -> Any:
        return [float(len(set(query) & set(s))) for s in batch]

    def admit(self, shape: Shape) -> None:
        self.events.append(f"admit {shape.bucket}x{shape.batch}")
        if shape.batch == 3:
            raise Declined("no programs of 3 rows here", "device-error")

    def evict(self, shape: Shape) -> None:
        self.events.append(f"evict {shape.bucket}x{shape.batch}")

    def close(self) -> None:
        self.events.append("close")


def spec(generation: int = 1, **options: Any) -> LaunchSpec:
    return LaunchSpec(model="m", package="pkg", worker_id="m#1", generation=generation,
                      options=options)  # fmt: skip


def logic(generation: int = 1, sink: list[dict[str, object]] | None = None, **options: Any) -> Any:
    trace_sink = None if sink is None else sink.append
    return build_logic(SumWorker, spec(generation, **options), pid=99, trace_sink=trace_sink)


def reply(action: object) -> Frame:
    assert isinstance(action, Reply), action
    return action.frame


def ready(worker: WorkerLogic, shape: Shape = S) -> WorkerLogic:
    assert isinstance(reply(worker.handle(Admit(1, shape))), Admitted)
    return worker


def infer(worker: WorkerLogic, batch: list[list[int]], query: list[int] | None = None) -> Frame:
    task = "embed" if query is None else "rerank"
    return reply(worker.handle(Infer(7, S, task, batch, query)))


# -- hello and declarations ------------------------------------------------------------------


def test_hello_reports_what_the_worker_declares() -> None:
    assert logic().hello() == Hello(
        protocol=PROTOCOL_VERSION,
        implementation="synapse-sum",
        version="1.2",
        model="m",
        package="pkg",
        generation=1,
        pid=99,
        buckets=[16, 32],
        dims=2,
        max_batch=4,
        identity="sum:pkg:v1",
        outputs={Kind.DENSE: 2, Kind.SCORE: 1},  # it writes embed and rerank
    )


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"buckets": ()}, "at least one bucket"),
        ({"buckets": (16, 0)}, "greater than 0"),
        ({"buckets": (16, 16)}, "listed twice"),
        ({"dims": 0}, "dims must be greater than 0"),
        ({"max_batch": -1}, "max_batch must be greater than 0"),
        ({"identity": ""}, "identity is empty"),
    ],
)
def test_a_worker_declaring_unusable_values_does_not_start(
    changes: dict[str, Any], problem: str
) -> None:
    class Broken(SumWorker):
        def load(self, options: SumOptions) -> None:
            super().load(options)
            for name, value in changes.items():
                setattr(self, name, value)

    with pytest.raises(ValueError, match=problem):
        build_logic(Broken, spec())


def test_implementation_defaults_to_the_top_level_package() -> None:
    class Plain(SumWorker):
        implementation = ""

    assert build_logic(Plain, spec()).hello().implementation == __name__.split(".")[0]


def test_without_options_type_load_gets_the_raw_options() -> None:
    seen: list[object] = []

    class Raw(SumWorker):
        options_type = None

        def load(self, options: Any) -> None:
            seen.append(options)
            self.buckets, self.identity = (8,), "raw"

    build_logic(Raw, spec(colour="blue"))
    assert seen == [{"colour": "blue"}]


# -- bookkeeping --------------------------------------------------------------------------------


def test_admission_is_cold_once_and_calls_admit_only_then() -> None:
    worker = logic()
    assert reply(worker.handle(Admit(1, S))) == Admitted(1, S, cold=True, cost=64)
    assert reply(worker.handle(Admit(2, S))) == Admitted(2, S, cold=False, cost=64)
    assert worker.worker.events == ["admit 16x4"]


@pytest.mark.parametrize("shape", [Shape(17, 1), Shape(16, 0), Shape(16, 5), Shape(16, -1)])
def test_shapes_outside_the_declared_buckets_and_batch_are_refused(shape: Shape) -> None:
    worker = logic()
    frame = reply(worker.handle(Admit(4, shape)))
    assert isinstance(frame, Failure) and (frame.request_id, frame.code) == (4, "bad-shape")
    assert worker.worker.events == []


def test_a_declined_admission_is_a_failure_and_leaves_the_shape_cold() -> None:
    worker = logic()
    frame = reply(worker.handle(Admit(3, Shape(16, 3))))
    assert frame == Failure(3, "device-error", "no programs of 3 rows here")
    assert reply(worker.handle(InventoryRequest(4))) == Inventory(4, [])


def test_inventory_is_sorted_and_evict_forgets_the_shape() -> None:
    worker = logic()
    for bucket, batch in [(32, 1), (16, 4), (16, 2)]:
        ready(worker, Shape(bucket, batch))
    assert reply(worker.handle(InventoryRequest(2))) == Inventory(
        2, [Shape(16, 2), Shape(16, 4), Shape(32, 1)]
    )
    assert reply(worker.handle(Evict(3, Shape(16, 4)))) == Evicted(3, Shape(16, 4))
    assert reply(worker.handle(Evict(4, Shape(32, 4)))) == Evicted(4, Shape(32, 4))  # not held
    assert worker.worker.events[-1] == "evict 16x4"
    assert reply(worker.handle(Admit(5, Shape(16, 4)))) == Admitted(5, Shape(16, 4), True, 64)


def test_shutdown_closes_once_and_stops() -> None:
    worker = logic()
    assert worker.handle(Shutdown()) == Stop()
    worker.close()
    assert worker.worker.events == ["close"]


def test_an_unexpected_frame_is_answered_with_a_failure() -> None:
    frame = reply(logic().handle(Admitted(1, S, cold=True)))
    assert isinstance(frame, Failure) and frame.code == "unexpected-frame"


# -- inference: the shape rule, outputs, failures -----------------------------------------------


def test_embed_rows_come_back_in_order_on_the_admitted_shape() -> None:
    worker = ready(logic())
    frame = infer(worker, [[1, 2], [5], []])
    assert isinstance(frame, Output)
    assert (frame.request_id, frame.shape, frame.rows, frame.dims) == (7, S, 3, 2)
    assert unpack_rows(frame) == [[2.0, 3.0], [1.0, 5.0], [0.0, 0.0]]
    assert worker.worker.events[-1] == "embed 16x4"  # the kit set ``shape`` first


@pytest.mark.parametrize(("after", "announced"), [(-1.0, True), (math.inf, False)])
def test_a_long_computation_is_announced_before_its_reply(
    monkeypatch: pytest.MonkeyPatch, after: float, announced: bool
) -> None:
    """A request that computed longer than ``NOTICE_AFTER_S`` sends
    ``computed`` at once, before the kit packs its reply; a shorter one does not."""
    import synapse_core.worker.model as kit

    monkeypatch.setattr(kit, "NOTICE_AFTER_S", after)
    sent: list[Frame] = []
    worker = ready(build_logic(SumWorker, spec(), pid=99, notify=sent.append))
    assert sent == []  # an admission is never announced
    assert isinstance(infer(worker, [[1, 2]]), Output)
    assert isinstance(infer(worker, [[1, 2]], query=[1]), Output)
    assert sent == ([Computed(7), Computed(7)] if announced else [])


def test_an_output_carries_the_time_the_model_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kit measures the author's ``embed`` itself: the host reads it, never guesses."""
    import synapse_core.worker.model as kit

    ticks = iter([1_000, 251_000])  # the clock before and after the model ran
    monkeypatch.setattr(kit, "time", SimpleNamespace(perf_counter_ns=lambda: next(ticks)))
    worker = ready(build_logic(SumWorker, spec(), pid=99))
    output = infer(worker, [[1, 2]])
    assert isinstance(output, Output) and output.compute_ns == 250_000


def test_rerank_gives_one_score_per_document() -> None:
    frame = infer(ready(logic()), [[1, 2], [3], [2, 9]], query=[2, 3])
    assert isinstance(frame, Output) and (frame.rows, frame.dims) == (3, 1)
    assert unpack_rows(frame) == [[1.0], [1.0], [1.0]]


@pytest.mark.parametrize(
    ("shape", "batch", "query", "problem"),
    [
        (Shape(32, 4), [[1]], None, "is not admitted"),
        (S, [[1]] * 5, None, "5 sequences exceed batch 4"),
        (S, [list(range(17))], None, "a sequence exceeds bucket 16"),
        (S, [list(range(10))], list(range(7)), "the 7-token query exceed bucket 16"),
    ],
    ids=["unadmitted", "over-batch", "over-bucket", "query-counts"],
)
def test_the_shape_rule_is_one_for_every_transport(
    shape: Shape, batch: list[list[int]], query: list[int] | None, problem: str
) -> None:
    task = "embed" if query is None else "rerank"
    frame = reply(ready(logic()).handle(Infer(6, shape, task, batch, query)))
    assert isinstance(frame, Failure) and frame.code == "bad-request"
    assert problem in frame.message


def test_a_pair_exactly_filling_the_bucket_is_served() -> None:
    frame = infer(ready(logic()), [list(range(10))], query=list(range(6)))
    assert isinstance(frame, Output)


def test_rerank_without_a_query_is_a_bad_request() -> None:
    frame = reply(ready(logic()).handle(Infer(6, S, "rerank", [[1]], None)))
    assert isinstance(frame, Failure) and "no query" in frame.message


def test_declined_wrong_and_raising_embeds_fail_the_request_only() -> None:
    worker = ready(logic())
    assert infer(worker, [[666]]) == Failure(7, "bad-number", "the number of the beast")
    wrong = infer(worker, [[0]])
    assert isinstance(wrong, Failure) and wrong.code == "bad-output"
    assert "returned 2 results for 1 sequences" in wrong.message
    raised = infer(worker, [[13]])
    assert raised == Failure(7, "worker-error", "ZeroDivisionError: unlucky")
    assert isinstance(infer(worker, [[1]]), Output)  # still serving


def test_an_output_that_is_not_rows_is_a_bad_output() -> None:
    class Chatty(SumWorker):
        def embed(self, batch: list[list[int]]) -> Any:
            return None if batch[0] == [1] else [["a", "b"] for _ in batch]

    worker = ready(build_logic(Chatty, spec()))
    for batch in ([[1]], [[2]]):
        frame = infer(worker, batch)
        assert isinstance(frame, Failure) and frame.code == "bad-output"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_nan_or_infinite_output_is_a_bad_output_and_the_worker_keeps_serving(
    bad: float,
) -> None:
    """Said by the kit as the worker's failure, not found by the host as a
    malformed reply (which would restart the worker and read as "may have run")."""

    class Unstable(SumWorker):
        def embed(self, batch: list[list[int]]) -> Any:
            return [[bad, 1.0] if s == [9] else [1.0, 1.0] for s in batch]

        def rerank(self, query: list[int], batch: list[list[int]]) -> Any:
            return [bad for _ in batch]

    worker = ready(build_logic(Unstable, spec()))
    for frame in (infer(worker, [[1], [9]]), infer(worker, [[1]], query=[1])):
        assert isinstance(frame, Failure) and frame.code == "bad-output"
        assert frame.message.endswith("returned NaN or infinite values")
    assert isinstance(infer(worker, [[1]]), Output)  # still serving


def test_a_model_without_rerank_declines_it() -> None:
    class EmbedOnly(SumWorker):
        rerank = ModelWorker.rerank

    worker = ready(build_logic(EmbedOnly, spec()))
    frame = infer(worker, [[1]], query=[1])
    assert isinstance(frame, Failure) and frame.code == "unsupported-task"


class FakeArray:
    """What the kit needs of a numpy array (the core never imports numpy)."""

    def __init__(self, rows: list[list[float]] | list[float]) -> None:
        self.rows = rows
        self.shape = (len(rows), len(rows[0])) if isinstance(rows[0], list) else (len(rows),)

    def astype(self, dtype: str) -> FakeArray:
        assert dtype == "<f4"
        return self

    def tobytes(self) -> bytes:
        from synapse_core.wire import pack_rows

        rows = self.rows
        return pack_rows([r if isinstance(r, list) else [r] for r in rows])  # type: ignore[misc]


def test_array_rows_are_packed_by_their_own_methods() -> None:
    class ArrayWorker(SumWorker):
        def embed(self, batch: list[list[int]]) -> Any:
            return FakeArray([[float(len(s)), 1.0] for s in batch])

        def rerank(self, query: list[int], batch: list[list[int]]) -> Any:
            return FakeArray([float(len(s)) for s in batch])

    worker = ready(build_logic(ArrayWorker, spec()))
    rows = infer(worker, [[1, 2], [3]])
    assert isinstance(rows, Output) and unpack_rows(rows) == [[2.0, 1.0], [1.0, 1.0]]
    scores = infer(worker, [[1, 2], [3]], query=[1])
    assert isinstance(scores, Output) and unpack_rows(scores) == [[2.0], [1.0]]


def test_an_array_of_the_wrong_shape_is_a_bad_output() -> None:
    class Wide(SumWorker):
        def embed(self, batch: list[list[int]]) -> Any:
            return FakeArray([[1.0, 2.0, 3.0] for _ in batch])

    frame = infer(ready(build_logic(Wide, spec())), [[1]])
    assert isinstance(frame, Failure) and frame.code == "bad-output"
    assert "shape (1, 3), expected (1, 2)" in frame.message


# -- fault knobs --------------------------------------------------------------------------------


def test_crash_hang_and_malformed_count_inferences() -> None:
    faults = {"crash_on_infer": 3, "hang_on_infer": 1, "malformed_on_infer": 2}
    worker = ready(logic(faults=faults))
    actions = [worker.handle(Infer(i, S, "embed", [[1]])) for i in range(1, 5)]
    assert actions[:3] == [Hang(), RawReply(MALFORMED, 0.0), Crash()]
    assert isinstance(reply(actions[3]), Output)


def test_crash_on_admit_counts_admissions() -> None:
    worker = logic(faults={"crash_on_admit": 2})
    assert isinstance(reply(worker.handle(Admit(1, S))), Admitted)
    assert worker.handle(Admit(2, S)) == Crash()


def test_delays_ride_on_the_reply_and_cold_admissions_wait_longer() -> None:
    worker = logic(faults={"reply_delay_s": 0.25, "cold_admit_delay_s": 1.5})
    cold, warm, inventory = (
        worker.handle(f) for f in (Admit(1, S), Admit(2, S), InventoryRequest(3))
    )
    assert isinstance(cold, Reply) and cold.delay_s == pytest.approx(1.75)
    assert isinstance(warm, Reply) and warm.delay_s == pytest.approx(0.25)
    assert isinstance(inventory, Reply) and inventory.delay_s == pytest.approx(0.25)


def test_only_generation_limits_the_knobs_to_that_generation() -> None:
    faults = {"crash_on_infer": 1, "ignore_sigterm": True, "only_generation": 2}
    for generation, faulty in [(1, False), (2, True), (3, False)]:
        worker = ready(logic(generation, faults=faults))
        assert worker.ignore_sigterm is faulty
        assert (worker.handle(Infer(1, S, "embed", [[1]])) == Crash()) is faulty


def test_no_knob_set_means_no_wrapper() -> None:
    assert type(logic()).__name__ == "ModelLogic"
    assert not Faults().active(1)


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"faults": {"crash_on_infer": 0}}, "options.faults.crash_on_infer: counts start at 1"),
        ({"faults": {"reply_delay_s": -1}}, "options.faults.reply_delay_s: must be a finite"),
        ({"faults": {"cold_admit_delay_s": float("nan")}}, "options.faults.cold_admit_delay_s:"),
        ({"faults": {"crash_on_infer": "x"}}, "options.faults.crash_on_infer: expected int"),
        ({"faults": {"reply_delay": 1}}, "options.faults: extra fields found (reply_delay)"),
        ({"trace": "."}, "options.trace: . is a directory, not a file to append to"),
        ({"buckets": [8, 0]}, "options.buckets: bucket sizes must be greater than 0"),
        ({"buckets": [8, 8]}, "options.buckets: a bucket is listed twice"),
    ],
)
def test_knob_and_option_errors_name_their_path(options: dict[str, Any], problem: str) -> None:
    # One bad value each; test_every_bad_value_is_reported_at_once covers several.
    with pytest.raises(ConfigError) as info:
        parse_options(options, SumOptions, source="model 'm'")
    assert info.value.source == "model 'm'"
    assert len(info.value.problems) == 1 and info.value.problems[0].startswith(problem)


def test_every_bad_value_is_reported_at_once() -> None:
    options = {"buckets": [0], "faults": {"crash_on_admit": 0, "reply_delay_s": -1.0}}
    with pytest.raises(ConfigError) as info:
        parse_options(options, SumOptions)
    assert [p.split(":")[0] for p in info.value.problems] == [
        "options.buckets",
        "options.faults.reply_delay_s",
        "options.faults.crash_on_admit",
    ]


# -- tracing ------------------------------------------------------------------------------------


def test_trace_records_every_frame_with_its_outcome() -> None:
    trace: list[dict[str, object]] = []
    worker = logic(4, trace, faults={"crash_on_infer": 2})
    worker.hello()
    for frame in [
        Admit(1, S),
        Admit(2, Shape(99, 1)),
        Infer(3, S, "embed", [[1], [2]]),
        Infer(4, S, "embed", [[1]]),
        InventoryRequest(5),
        Evict(6, S),
        Shutdown(),
    ]:
        worker.handle(frame)
    who = {"pid": 99, "model": "m", "generation": 4}
    assert trace == [
        {**who, "frame": "hello", "shape": None, "request_id": None},
        {**who, "frame": "admit", "shape": [16, 4], "request_id": 1, "cold": True},
        {**who, "frame": "admit", "shape": [99, 1], "request_id": 2, "refused": "bad-shape"},
        {**who, "frame": "infer", "shape": [16, 4], "request_id": 3, "rows": 2},
        {**who, "frame": "infer", "shape": [16, 4], "request_id": 4, "rows": 1, "fault": "crash"},
        {**who, "frame": "inventory", "shape": None, "request_id": 5},
        {**who, "frame": "evict", "shape": [16, 4], "request_id": 6},
        {**who, "frame": "shutdown", "shape": None, "request_id": None},
    ]


def test_the_trace_option_appends_json_lines(tmp_path: Any) -> None:
    import json

    path = tmp_path / "trace.jsonl"
    worker = logic(trace=str(path))
    worker.hello()
    worker.handle(Admit(1, S))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["frame"] for r in lines] == ["hello", "admit"]
