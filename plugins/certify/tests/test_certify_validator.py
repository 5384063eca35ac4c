"""The placement gate, including the two named certification checks."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from synapse_certify import Recorder, check, read_stream
from synapse_certify.stream import dumps, loads
from synapse_core import HostConfig, open_host
from synapse_core.events import (
    AdmissionCount,
    Event,
    ShapeAdmitted,
    ShapeRefunded,
    WorkerExited,
    WorkerInventory,
    WorkerStarted,
)
from synapse_core.plugin import Frame, Shape
from synapse_core.testing import host_config, model_entry, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.wire import InventoryRequest

LANE = "mock:0"
WORKER = "mini-a#1"
S16, S32, S64 = Shape(16, 1), Shape(32, 1), Shape(64, 1)


def started(generation: int = 1) -> WorkerStarted:
    return WorkerStarted(LANE, WORKER, generation, "mini-a", 4242)


def admitted(shape: Shape, generation: int = 1) -> ShapeAdmitted:
    return ShapeAdmitted(LANE, WORKER, generation, shape, shape.bucket, True)


def inventory(shapes: list[Shape] | None, generation: int = 1) -> WorkerInventory:
    reason = "ChannelClosed: worker closed the channel" if shapes is None else ""
    return WorkerInventory(LANE, WORKER, generation, shapes, reason)


def count(n: int, generation: int = 1) -> AdmissionCount:
    return AdmissionCount(LANE, WORKER, generation, n)


def exited(generation: int = 1, confirmed: bool = True) -> WorkerExited:
    return WorkerExited(LANE, WORKER, generation, confirmed)


def refunded(shape: Shape, generation: int = 1) -> ShapeRefunded:
    return ShapeRefunded(LANE, WORKER, generation, shape, shape.bucket)


def closed(*shapes: Shape, generation: int = 1) -> list[Event]:
    """How a generation ends: its exit confirmed, then each held shape refunded."""
    return [exited(generation), *(refunded(s, generation) for s in shapes)]


def recorded(tmp_path: Path, name: str, events: list[Event]) -> list[Event]:
    """Write ``events`` the way a recording does and read them back."""
    path = tmp_path / name
    with Recorder(path, keep=False) as recorder:
        for event in events:
            recorder.synapse_observe(event)
    return read_stream(path)


def rules(events: list[Event]) -> list[tuple[str, str | None, int | None]]:
    return [(p.rule, p.worker_id, p.generation) for p in check(events).problems]


def certify_config() -> HostConfig:
    model = model_entry("mini-a", package="mock-minilm", ceiling=512, dims=8)
    return host_config(model, certify_observation=True)


# -- named checks ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_serialized_inventory_omission_fails_placement_gate(tmp_path: Path) -> None:
    # Three runs alike but for the inventory's ``shapes``: read, missing, empty.
    def run(shapes: list[Shape] | None) -> list[Event]:
        return [started(), admitted(S16), inventory(shapes), count(1), *closed(S16)]

    missing = recorded(tmp_path, "missing.jsonl", run(None))
    read = recorded(tmp_path, "read.jsonl", run([S16]))
    empty = recorded(tmp_path, "empty.jsonl", run([]))

    assert b'"shapes":null' in (tmp_path / "missing.jsonl").read_bytes()
    read_back = [e for e in missing if isinstance(e, WorkerInventory)]
    assert [e.shapes for e in read_back] == [None]  # not [] after the round trip
    assert rules(missing) == [("inventory-missing", WORKER, 1)]
    assert check(missing).problems[0].at == 3
    assert check(read).ok, check(read).problems
    # An empty inventory is a different claim (the worker holds nothing), and
    # the replay refuses it for what it is, not as a missing one.
    assert rules(empty) == [("inventory-disagrees", WORKER, 1), ("count-mismatch", WORKER, 1)]

    # The supervisor side: an inventory that cannot be read is recorded as
    # missing (not as an empty list, not left out), and the gate fails it.
    transport = InProcessFakeTransport("mock")
    killed: list[int] = []

    async def kill_on_first_inventory(model: str, frame: Frame) -> None:
        if isinstance(frame, InventoryRequest) and not killed:
            record = transport.launched(model)[-1]
            killed.append(record.generation)
            record.process.kill()
            await anyio.lowlevel.checkpoint()  # the worker dies here, without replying

    transport.reply_gate = kill_on_first_inventory
    path = tmp_path / "live.jsonl"
    recorder = Recorder(path, keep=False)
    async with open_host(certify_config(), plugins=[transport_plugin(transport), recorder]) as host:
        result = await host.embed("mini-a", ["short text"])
    recorder.close()

    assert killed == [1] and len(result.vectors) == 1
    live = read_stream(path)
    first = [e for e in live if isinstance(e, WorkerInventory) and e.generation == 1]
    assert [e.shapes for e in first] == [None]
    assert ("inventory-missing", WORKER, 1) in rules(live)
    # The replacement generation's inventory was read and agrees with its count.
    assert [r for r in rules(live) if r[2] != 1] == []


def test_validator_refuses_placement_inventory_count_mismatch(tmp_path: Path) -> None:
    # The supervisor follows every admission with an inventory and a count.
    one_shape = [started(), admitted(S16), inventory([S16]), count(1)]
    two_shapes = [*one_shape, admitted(S32), inventory([S16, S32])]
    end = closed(S16, S32)

    refused = recorded(tmp_path, "mismatch.jsonl", [*two_shapes, count(3), *end])
    report = check(refused)
    assert not report.ok
    assert [(p.rule, p.worker_id, p.generation, p.at) for p in report.problems] == [
        ("count-mismatch", WORKER, 1, 7)
    ]
    assert "2 shape(s), admission count is 3" in report.problems[0].message
    assert "differs from the 2 the stream's admissions minus evictions give" in (
        report.problems[0].message
    )

    fewer = recorded(tmp_path, "fewer.jsonl", [*two_shapes, count(1), *end])
    assert rules(fewer) == [("count-mismatch", WORKER, 1)]

    equal = recorded(tmp_path, "equal.jsonl", [*two_shapes, count(2), *end])
    assert check(equal).ok, check(equal).problems

    # Each inventory is held to the count recorded with it, not to the last one.
    early = [started(), admitted(S16), inventory([S16]), count(2), admitted(S32)]
    late = recorded(tmp_path, "early.jsonl", [*early, inventory([S16, S32]), count(2), *end])
    assert [(p.rule, p.at) for p in check(late).problems] == [("count-mismatch", 4)]

    # A count that agrees with its inventory but not with the replayed
    # admissions is refused too: both sides could share one bookkeeping error.
    agreeing = [started(), admitted(S16), inventory([S16, S32]), count(2), *closed(S16)]
    assert ("count-mismatch", WORKER, 1) in rules(agreeing)


# -- the other gate rules --------------------------------------------------------------


def test_admission_without_any_inventory_fails() -> None:
    # What a recording made with certify_observation off looks like.
    assert rules([started(), admitted(S16), admitted(S32), *closed(S16, S32)]) == [
        ("inventory-absent", WORKER, 1),
        ("empty-stream", None, None),
    ]


def test_each_admission_needs_its_own_inventory() -> None:
    events = [started(), admitted(S16), inventory([S16]), count(1), admitted(S32)]
    events += closed(S16, S32)
    assert rules(events) == [("inventory-absent", WORKER, 1)]
    assert "1 admitted shape(s)" in check(events).problems[0].message


def test_inventories_are_matched_per_worker_generation() -> None:
    # Generation 2's inventory does not stand in for generation 1's.
    events = [
        started(1),
        admitted(S16, generation=1),
        *closed(S16, generation=1),
        started(2),
        admitted(S16, generation=2),
        inventory([S16], generation=2),
        count(1, generation=2),
        *closed(S16, generation=2),
    ]
    assert rules(events) == [("inventory-absent", WORKER, 1)]


def test_inventory_and_count_must_come_in_pairs() -> None:
    head = [started(), admitted(S16), inventory([S16])]
    assert rules([*head, *closed(S16)]) == [("count-absent", WORKER, 1)]
    assert rules([*head, count(1), count(1), *closed(S16)]) == [("inventory-absent", WORKER, 1)]


def test_a_shape_listed_twice_is_refused() -> None:
    events = [
        started(),
        admitted(S16),
        inventory([S16]),
        count(1),
        admitted(S64),
        inventory([S16, S16]),
        count(2),
        *closed(S16, S64),
    ]
    assert sorted(rules(events)) == [
        ("count-mismatch", WORKER, 1),
        ("duplicate-shape", WORKER, 1),
        ("inventory-disagrees", WORKER, 1),
    ]


def test_an_empty_stream_certifies_nothing() -> None:
    report = check([])
    assert not report.ok
    assert [p.rule for p in report.problems] == ["empty-stream"]
    assert report.problems[0].line().startswith("end of stream: stream: ")


def test_report_counts_and_lines() -> None:
    events = [started(), admitted(S16), inventory([S16]), count(1)]
    report = check(loads(dumps([*events, *closed(S16)])))
    assert report.ok
    assert (report.events, report.inventories, report.generations) == (6, 1, 1)
    assert report.summary() == (
        "placement gate passed: 6 events, 1 inventories of 1 worker generation(s)"
    )
    bad = check([*events, admitted(S32), inventory(None), count(2), *closed(S16, S32)])
    assert [p.line() for p in bad.problems] == [
        f"line 6: {WORKER} generation 1: inventory is missing "
        "(not read: ChannelClosed: worker closed the channel) [inventory-missing]"
    ]
    assert bad.to_dict()["problems"][0]["worker_id"] == WORKER
    assert bad.to_dict()["problems"][0]["at"] == 6
