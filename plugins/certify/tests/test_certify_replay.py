"""The gate replays the stream: a stream that contradicts itself does not pass.

Each tampering below starts from an honest recording and changes one thing;
the gate must refuse it, naming the rule and the line. The honest streams
around them (evictions, recoveries, late-confirmed exits, interleaved
admissions) must still pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from synapse_certify import StreamError, check, read_stream
from synapse_certify.stream import dumps
from synapse_core import observation as ev
from synapse_core.plugin import Shape

LANE = "mock:0"
W = "mini-a#1"
S16, S32, S64 = Shape(16, 1), Shape(32, 1), Shape(64, 1)


def started(gen: int = 1, worker: str = W, model: str = "mini-a", lane: str = LANE) -> ev.Event:
    return ev.WorkerStarted(lane, worker, gen, model, 4000 + gen)


def admitted(shape: Shape, gen: int = 1, units: int | None = None, worker: str = W) -> ev.Event:
    return ev.ShapeAdmitted(
        LANE, worker, gen, shape, shape.bucket if units is None else units, True
    )


def refunded(shape: Shape, gen: int = 1, units: int | None = None, worker: str = W) -> ev.Event:
    return ev.ShapeRefunded(LANE, worker, gen, shape, shape.bucket if units is None else units)


def inventory(shapes: list[Shape] | None, gen: int = 1, worker: str = W) -> ev.Event:
    return ev.WorkerInventory(LANE, worker, gen, shapes, "" if shapes is not None else "gone")


def count(n: int, gen: int = 1, worker: str = W) -> ev.Event:
    return ev.AdmissionCount(LANE, worker, gen, n)


def exited(gen: int = 1, confirmed: bool = True, worker: str = W) -> ev.Event:
    return ev.WorkerExited(LANE, worker, gen, confirmed)


def faulted(gen: int = 1) -> ev.Event:
    return ev.WorkerFaulted(LANE, W, gen, "ChannelClosed: worker closed its end of the channel")


#: An honest run: two admissions, each with its inventory and count, then the
#: exit and the refunds. Line numbers are positions (1-based).
HONEST: list[ev.Event] = [
    started(),  # 1
    admitted(S16),  # 2
    inventory([S16]),  # 3
    count(1),  # 4
    admitted(S32),  # 5
    inventory([S16, S32]),  # 6
    count(2),  # 7
    exited(),  # 8
    refunded(S16),  # 9
    refunded(S32),  # 10
]


def found(events: list[ev.Event]) -> list[tuple[str, int | None]]:
    """(rule, line) of each problem."""
    return [(p.rule, p.at) for p in check(events).problems]


def without(*lines: int) -> list[ev.Event]:
    return [e for n, e in enumerate(HONEST, start=1) if n not in lines]


def replaced(line: int, event: ev.Event) -> list[ev.Event]:
    return [event if n == line else e for n, e in enumerate(HONEST, start=1)]


def test_the_honest_run_passes() -> None:
    assert check(HONEST).ok, check(HONEST).problems


def test_an_inventory_naming_a_shape_never_admitted_is_refused() -> None:
    # The count still agrees (2 shapes, count 2): only the replay can tell.
    events = replaced(6, inventory([S16, S64]))
    assert found(events) == [("inventory-disagrees", 6)]
    message = check(events).problems[0].message
    assert "lists (64, 1), never admitted" in message and "lacks (32, 1) (line 5)" in message


def test_a_removed_admission_is_refused() -> None:
    # Inventory and count still agree with each other; the replay does not.
    assert found(without(5)) == [
        ("unexpected-inventory", 5),
        ("inventory-disagrees", 5),
        ("count-mismatch", 6),
    ]


def test_a_removed_worker_started_is_refused() -> None:
    assert found(without(1)) == [("not-started", 1)]


def test_a_removed_worker_exited_is_refused() -> None:
    # The refunds then read as evictions of a worker that never stopped.
    assert found(without(8)) == [("not-exited", None)]


def test_a_removed_refund_is_refused() -> None:
    assert found(without(10)) == [("refund-missing", None)]
    assert "(32, 1) never refunded" in check(without(10)).problems[0].message


def test_changed_units_are_refused() -> None:
    assert found(replaced(9, refunded(S16, units=99))) == [("units-mismatch", 9)]


def test_a_refund_before_its_admission_is_refused() -> None:
    moved = [HONEST[0], HONEST[9], *HONEST[1:9]]
    assert found(moved) == [("refund-unadmitted", 2), ("refund-missing", None)]


def test_a_ghost_worker_is_refused() -> None:
    ghost = "ghost#9"
    events = [
        *HONEST,
        admitted(S64, worker=ghost),
        inventory([S64], worker=ghost),
        count(1, worker=ghost),
    ]
    assert found(events) == [("not-started", 11)]
    assert check(events).problems[0].worker_id == ghost


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ((5, 6, 7), [("readmitted", 8), ("unexpected-inventory", 9)]),
        ((3, 4), [("unexpected-inventory", 5)]),
        (
            (8, 9, 10),
            [("duplicate-exit", 11), ("refund-unadmitted", 12), ("refund-unadmitted", 13)],
        ),
        ((1,), [("duplicate-start", 2)]),
    ],
)
def test_a_duplicated_block_is_refused(
    block: tuple[int, ...], expected: list[tuple[str, int]]
) -> None:
    copy = [HONEST[n - 1] for n in block]
    end = block[-1]
    events = [*HONEST[:end], *copy, *HONEST[end:]]
    assert found(events) == expected


def test_unknown_fields_are_refused_naming_the_line(tmp_path: Path) -> None:
    lines = dumps(HONEST).splitlines()
    lines[5] = lines[5][:-1] + b',"verified":true}'
    path = tmp_path / "extra.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(StreamError) as info:
        read_stream(path)
    assert info.value.line == 6
    assert "unknown field `verified`" in str(info.value)


def test_a_shape_with_an_extra_element_is_refused_naming_the_line(tmp_path: Path) -> None:
    lines = dumps(HONEST).splitlines()
    lines[1] = lines[1].replace(b'"shape":[16,1]', b'"shape":[16,1,2]')
    path = tmp_path / "extra.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(StreamError) as info:
        read_stream(path)
    assert info.value.line == 2


def test_an_inventory_no_admission_asked_for_is_refused() -> None:
    events = [*HONEST[:7], inventory([S16, S32]), count(2), *HONEST[7:]]
    assert found(events) == [("unexpected-inventory", 8)]


def test_events_after_a_confirmed_exit_are_refused() -> None:
    assert found([*HONEST, admitted(S64), inventory([S16, S32, S64]), count(3)]) == [
        ("after-exit", 11),
        ("unexpected-inventory", 12),
        ("after-exit", 12),
        ("inventory-disagrees", 12),
        ("count-mismatch", 13),
    ]
    assert found([*HONEST, faulted()]) == [("after-exit", 11)]


def test_a_refund_before_the_exit_is_confirmed_is_refused() -> None:
    events = [*HONEST[:7], exited(confirmed=False), *HONEST[8:]]
    assert found(events) == [
        ("refund-unconfirmed", 9),
        ("refund-unconfirmed", 10),
        ("exit-unconfirmed", None),
    ]


def test_a_replacement_before_the_exit_is_confirmed_is_refused() -> None:
    events = [*HONEST[:7], faulted(), started(2), exited(2), *HONEST[7:]]
    assert ("restart-before-exit", 9) in found(events)


def test_a_worker_that_changes_lane_or_model_is_refused() -> None:
    events = [
        *HONEST,
        started(2, model="other"),
        admitted(S16, 2),
        inventory([S16], 2),
        count(1, 2),
        exited(2),
        refunded(S16, 2),
    ]
    assert found(events) == [("worker-mismatch", 11)]


# -- honest streams that must pass ------------------------------------------------------


def test_an_eviction_refunds_while_running_and_lowers_the_count() -> None:
    events = [
        *HONEST[:7],
        refunded(S16),  # evicted
        admitted(S64),
        inventory([S32, S64]),
        count(2),
        exited(),
        refunded(S32),
        refunded(S64),
    ]
    assert check(events).ok, check(events).problems
    # The same eviction with the evicted shape still in the inventory is refused.
    events[9] = inventory([S16, S32, S64])
    assert found(events) == [("inventory-disagrees", 10), ("count-mismatch", 11)]


def test_a_recovery_with_a_missing_inventory_fails_only_for_its_generation() -> None:
    events = [
        started(1),
        admitted(S16, 1),
        faulted(1),
        inventory(None, 1),
        count(1, 1),
        exited(1),
        refunded(S16, 1),
        refunded(S32, 1),  # charged for an admission that never completed
        started(2),
        admitted(S16, 2),
        inventory([S16], 2),
        count(1, 2),
        exited(2),
        refunded(S16, 2),
    ]
    assert [(p.rule, p.generation, p.at) for p in check(events).problems] == [
        ("inventory-missing", 1, 4)
    ]


def test_an_exit_confirmed_late_then_refunds() -> None:
    events = [*HONEST[:7], exited(confirmed=False), *HONEST[7:]]
    assert check(events).ok, check(events).problems


def test_interleaved_admissions_are_each_inventoried() -> None:
    events = [
        started(),
        admitted(S16),
        admitted(S32),
        inventory([S16, S32]),
        count(2),
        inventory([S16, S32]),
        count(2),
        *HONEST[7:],
    ]
    assert check(events).ok, check(events).problems


def test_a_missing_inventory_recorded_after_the_exit_is_only_missing() -> None:
    # A dead worker's inventory request can fail after recovery already
    # confirmed its exit: recorded late, it is missing, nothing more.
    events = [*HONEST[:5], faulted(), exited(), refunded(S16), refunded(S32)]
    events += [inventory(None), count(2)]
    assert found(events) == [("inventory-missing", 10)]
