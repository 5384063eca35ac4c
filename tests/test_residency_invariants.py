"""The residency invariant check the stateful test runs after every step
finds each kind of broken state it looks for (and nothing in a sound one)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from synapse_core.launch import LaneInfo
from synapse_core.residency.invariants import ResidencyCheck
from synapse_core.residency.lane import Lane
from synapse_core.residency.worker import Guard, Worker
from synapse_core.wire import Shape

SHAPE = Shape(8, 2)


def _supervisor() -> Any:
    """A lane with one worker that admitted ``SHAPE`` (16 units of 100)."""
    lane = Lane(LaneInfo("test:0"), 100)
    worker = Worker("m#1", None, None, None, lane)  # type: ignore[arg-type]
    lane.charge(worker.worker_id, 1, SHAPE, 16)
    worker.admitting(SHAPE)
    worker.admitted(SHAPE, 16)
    worker.exchanged(SHAPE)
    return SimpleNamespace(lane=lane, workers={worker.worker_id: worker})


def test_a_sound_state_has_no_violation() -> None:
    assert ResidencyCheck().violations([_supervisor()]) == []


def test_reservations_that_do_not_add_up_are_found() -> None:
    sup = _supervisor()
    sup.lane.reserved = 20
    assert ResidencyCheck().violations([sup]) == [
        "lane test:0: reserved 20, charges add up to 16, capacity 100"
    ]


def test_an_admitted_shape_without_its_charge_is_found() -> None:
    sup = _supervisor()
    sup.lane.refund("m#1", SHAPE)
    (found,) = ResidencyCheck().violations([sup])
    assert found.startswith("m#1: Shape(bucket=8, batch=2) admitted with 16 units, charged None")


def test_an_exited_worker_still_charged_is_found() -> None:
    sup = _supervisor()
    sup.workers["m#1"].exited()
    assert "m#1: exited but still charged" in ResidencyCheck().violations([sup])


def test_a_shape_admitted_and_busy_at_once_is_found() -> None:
    sup = _supervisor()
    sup.workers["m#1"].busy_shapes[SHAPE] = None
    (found,) = ResidencyCheck().violations([sup])
    assert "admitted and busy at once" in found


def test_a_generation_that_goes_back_and_a_retirement_undone_are_found() -> None:
    sup = _supervisor()
    worker = sup.workers["m#1"]
    check = ResidencyCheck()
    worker.generation = 3
    worker.retire()
    assert check.violations([sup]) == []
    worker.generation = 2
    worker.retiring = False
    assert check.violations([sup]) == [
        "m#1: generation went back from 3 to 2",
        "m#1: retiring was set and is no longer",
    ]


def test_guard_counts_that_do_not_add_up_are_found() -> None:
    sup = _supervisor()
    (worker,) = sup.workers.values()
    worker.enter(True)
    worker.leave(Guard(worker, small=False))  # left as bulk what entered small
    assert ResidencyCheck().violations([sup]) == ["m#1: 1 small calls in flight of 0"]


def test_a_worker_that_has_served_calls_is_freed_without_the_cycle_collector() -> None:
    """A replaced worker's record (its channel, its process) goes when the
    last reference does: the guards it hands out hold it, it holds none."""
    import gc
    import weakref

    worker = Worker("m#1", None, None, None, Lane(LaneInfo("test:0"), 100))  # type: ignore[arg-type]
    worker.leave(worker.enter(True))
    guard = worker.enter(False)
    worker.leave(guard)
    del guard
    gone = weakref.ref(worker)
    gc.disable()
    try:
        del worker
        assert gone() is None
    finally:
        gc.enable()
