"""The invariants of what calls hold and of the host's backlog, as stated at
the fields of ``Call``, ``Coalesced``, ``CallRunner`` and ``Backlog``: a
checker the stateful test runs after every step (on the host's loop, while
every task is blocked)."""

from __future__ import annotations

from collections.abc import Iterable

from synapse_core.call import Call, Coalesced
from synapse_core.host import Host


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
    for coalescer in host._coalescers.values():
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
