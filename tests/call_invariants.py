"""The invariants of what calls hold and of the host's backlog, as stated at
the fields of ``Call``, ``Coalesced``, ``CallRunner``, ``Backlog``,
``Coalescer``, ``Replicas`` and ``Plan``: checkers the stateful test runs
after every step (on the host's loop, while every task is blocked)."""

from __future__ import annotations

from collections.abc import Iterable

from synapse_core.call import Call, Coalesced
from synapse_core.host import Host
from synapse_core.residency.worker import Phase, Worker
from synapse_core.wire import Hello


def call_problems(call: Call) -> list[str]:
    """What ``call`` holds against the invariants at ``Call``'s fields."""
    name = f"call of {call.plan.model!r} ({id(call):x})"
    found = []
    if call.permit is not None and call.queued:
        found.append(f"{name} holds a permit and is queued for one")
    if call.guard is not None and call.permit is None:
        found.append(f"{name} entered the guard without a permit")
    if call.lease is not None and not (call.guard is not None and call.permit is not None):
        found.append(f"{name} holds a lease without guard and permit")
    if call.begun is not None and not (call.lease is not None and call.guard is not None):
        found.append(f"{name} has a request under way without lease and guard")
    if call.done.is_set():
        held = [
            what
            for what, holds in (
                ("permit", call.permit is not None),
                ("place in line", call.queued),
                ("guard", call.guard is not None),
                ("lease", call.lease is not None),
                ("request", call.begun is not None),
            )
            if holds
        ]
        if held:
            found.append(f"{name} ended holding {', '.join(held)}")
    if isinstance(call, Coalesced) and call.gone == len(call.callers) and not call.abandoned:
        found.append(f"{name}: every caller gave up, yet it is not abandoned")
    return found


def serving_problems(host: Host, calls: Iterable[Call]) -> list[str]:
    """Every call's problems, and the counts the host keeps of them: the
    runner's permit waiters are the queued calls; the backlog counts those,
    the calls queued to be coalesced, and at most the calls that hold a
    permit but no lease (waiting for lane room); each worker's guard count
    is the calls that entered it."""
    calls = list(calls)
    found = [problem for call in calls for problem in call_problems(call)]
    runner = host._runner
    queued = sum(1 for call in calls if call.queued)
    if runner.permit_waiters != queued:
        found.append(f"{runner.permit_waiters} permit waiters counted, {queued} calls queued")
    coalescing = 0
    for coalescer in host._starts.coalescers.values():
        coalescing += len(coalescer.queue)
        for call in coalescer.queue:
            if call.joined is not coalescer or not call.admitted:
                found.append(f"call {id(call):x} is queued to be coalesced, not joined to it")
    unleased = sum(
        1
        for call in calls
        if call.permit is not None and call.lease is None and not call.done.is_set()
    )
    waiting = host.backlog.waiting
    if not queued + coalescing <= waiting <= queued + coalescing + unleased:
        found.append(
            f"backlog of {waiting}: {queued} queued for a permit, {coalescing} to be "
            f"coalesced, {unleased} holding a permit but no lease"
        )
    entered = sum(1 for call in calls if call.guard is not None)
    inflight = sum(w.inflight for sup in host.supervisors.values() for w in sup.workers.values())
    if inflight != entered:
        found.append(f"workers count {inflight} calls in flight, {entered} calls entered")
    return found


def coalescing_problems(host: Host) -> list[str]:
    """Each coalescing queue against the invariants at ``Coalescer``'s fields:
    at most ``slots`` calls run, each started and not yet ended; a queued
    call is queued once and not running (that each is joined, admitted and
    counted in the backlog, ``serving_problems`` checks); the callers of a
    running coalesced call are joined to it."""
    found = []
    for model, coalescer in host._starts.coalescers.items():
        running, queue = coalescer.running, coalescer.queue
        if len(running) > coalescer._slots:
            found.append(f"{model}: {len(running)} calls run, {coalescer._slots} slots")
        if any(call.done.is_set() for call in running):
            found.append(f"{model}: a call that ended is still counted as running")
        queued = {id(call) for call in queue}
        if len(queued) != len(queue) or queued & {id(call) for call in running}:
            found.append(f"{model}: a call is queued twice, or queued and running")
        for call in running:
            if isinstance(call, Coalesced) and any(c.joined is not call for c in call.callers):
                found.append(f"{model}: a caller of a running coalesced call is not joined to it")
    return found


def plan_problems(calls: Iterable[Call]) -> list[str]:
    """The invariant at ``Plan``'s fields (its steps are kept with the
    selection that cut them, or neither is), and what the kept steps must
    stay however they are joined (``cut.join_next`` rewrites them in place):
    every input in exactly one step, each step within the worker's batch
    size and in a bucket that fits each of its inputs."""
    found = []
    for call in calls:
        plan, name = call.plan, f"plan of call {id(call):x}"
        steps, hello = plan.steps, plan._cut_by
        if (steps is None) != (hello is None):
            found.append(f"{name}: steps kept without their selection, or the reverse")
        if steps is None or not isinstance(hello, Hello):
            continue
        sent = sorted(item.index for step in steps for item in step.items)
        if sent != sorted(item.index for item in plan.items):
            found.append(f"{name}: the kept steps do not hold each input exactly once")
        if any(len(step.items) > hello.max_batch for step in steps):
            found.append(f"{name}: a kept step is over the batch size {hello.max_batch}")
        if any(item.length > step.bucket for step in steps for item in step.items):
            found.append(f"{name}: an input is in a step whose bucket it does not fit")
    return found


class ReplicaCheck:
    """The invariant at ``Replicas.slots``, step after step: one slot per
    worker the entry asks for, and a slot's worker replaced only once it
    exited or failed."""

    def __init__(self) -> None:
        #: model -> the workers in its slots at the last check
        self._seen: dict[str, list[Worker | None]] = {}

    def problems(self, host: Host) -> list[str]:
        found = []
        for model, replicas in host._roster.replicas.items():
            slots = replicas.slots
            wanted = host.catalog.entries[model].spec.workers
            if len(slots) != wanted:
                found.append(f"{model}: {len(slots)} slots, {wanted} workers asked for")
            for i, (before, now) in enumerate(zip(self._seen.get(model, []), slots, strict=False)):
                gone = before is None or before.phase in (Phase.EXITED, Phase.FAILED)
                if now is not before and not gone:
                    found.append(f"{model}: slot {i}'s worker was replaced while it could serve")
            self._seen[model] = list(slots)
        return found
