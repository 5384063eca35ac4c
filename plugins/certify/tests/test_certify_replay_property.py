"""Generated honest streams pass the gate; losing or repeating any event fails it.

A small reference model writes what a supervisor records for one worker over
several generations: admissions (each with its inventory and count),
evictions, faults, exits (some confirmed only later) and refunds. Every
such stream must pass, and removing or repeating any event that carries
placement information must fail.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synapse_certify import check
from synapse_core import observation as ev
from synapse_core.plugin import Shape

LANE, W = "mock:0", "m#1"
SHAPES = [Shape(b, 2) for b in (8, 16, 32, 64)]

#: one generation's life: ops on its shapes, whether it faults, whether its
#: exit is confirmed only on a second event
Life = tuple[list[tuple[bool, int]], bool, bool]

Order = Callable[[list[Shape]], list[Shape]]

lives = st.tuples(
    st.lists(st.tuples(st.booleans(), st.integers(0, len(SHAPES) - 1)), max_size=8),
    st.booleans(),
    st.booleans(),
)


def honest(generations: list[Life], order: Order = list) -> list[ev.Event]:
    """What a supervisor records for ``generations`` of worker ``W``; ``order``
    puts the refunds after an exit in some order (the lane's, in practice)."""
    events: list[ev.Event] = []
    for number, (ops, faults, late) in enumerate(generations, start=1):
        events.append(ev.WorkerStarted(LANE, W, number, "m", 100 + number))
        held: list[Shape] = []
        for admit, which in ops:
            shape = SHAPES[which]
            if admit and shape not in held:
                held.append(shape)
                events.append(ev.ShapeAdmitted(LANE, W, number, shape, shape.bucket, True))
                events.append(ev.WorkerInventory(LANE, W, number, list(held)))
                events.append(ev.AdmissionCount(LANE, W, number, len(held)))
            elif not admit and shape in held:  # an eviction
                held.remove(shape)
                events.append(ev.ShapeRefunded(LANE, W, number, shape, shape.bucket))
        if faults:
            events.append(ev.WorkerFaulted(LANE, W, number, "crashed"))
        if late:
            events.append(ev.WorkerExited(LANE, W, number, False))
        events.append(ev.WorkerExited(LANE, W, number, True))
        for shape in order(held):
            events.append(ev.ShapeRefunded(LANE, W, number, shape, shape.bucket))
    return events


def carries_placement(event: ev.Event) -> bool:
    """Events whose loss must fail the gate (a fault's, or an unconfirmed
    exit's that a confirmed one follows, changes no placement)."""
    if isinstance(event, ev.WorkerFaulted):
        return False
    return not (isinstance(event, ev.WorkerExited) and not event.confirmed)


streams = st.lists(lives, min_size=1, max_size=3)


def shuffled(data: st.DataObject) -> Order:
    return lambda held: data.draw(st.permutations(held))


@settings(max_examples=150, deadline=None)
@given(streams, st.data())
def test_honest_streams_pass(generations: list[Life], data: st.DataObject) -> None:
    events = honest(generations, shuffled(data))
    report = check(events)
    has_inventory = any(isinstance(e, ev.WorkerInventory) for e in events)
    if has_inventory:
        assert report.ok, [p.line() for p in report.problems]
    else:
        assert [p.rule for p in report.problems] == ["empty-stream"]


#: ways to tamper with the event at ``i``: lose it, or repeat it at once
TAMPERINGS = {
    "removed": lambda events, i: events[:i] + events[i + 1 :],
    "repeated": lambda events, i: events[: i + 1] + events[i:],
}


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
@settings(max_examples=150, deadline=None)
@given(generations=streams, data=st.data())
def test_losing_or_repeating_any_placement_event_fails(
    tampering: str, generations: list[Life], data: st.DataObject
) -> None:
    events = honest(generations, shuffled(data))
    candidates = [i for i, e in enumerate(events) if carries_placement(e)]
    i = data.draw(st.sampled_from(candidates))
    tampered = TAMPERINGS[tampering](events, i)
    assert not check(tampered).ok, f"{tampering} line {i + 1}: {events[i]!r}"


@pytest.mark.parametrize("late", [False, True])
def test_the_reference_model_writes_what_the_gate_expects(late: bool) -> None:
    events = honest([([(True, 1), (True, 0), (False, 0)], True, late)])
    assert check(events).ok
    assert sum(isinstance(e, ev.ShapeRefunded) for e in events) == 2
