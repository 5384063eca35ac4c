"""The pieces each speed shortcut replaces, timed alone with and without it.

Tight loops, the two sides alternating call by call (see
:mod:`benchmarks.shortcuts`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import anyio

from synapse_core.call import Call
from synapse_core.catalog import Catalog
from synapse_core.cut import selection_of
from synapse_core.deadline import Deadline
from synapse_core.plan import plan_call
from synapse_core.plugins import PluginHost
from synapse_core.residency.lane import Backlog, Lane
from synapse_core.residency.worker import Worker
from synapse_core.serving import CallRunner
from synapse_core.wire import Hello

from . import rig
from .shortcut_switches import through_pluggy

#: operations per sample of a piece's figure (one is too short to time)
PIECE_BATCH = 20


def bucket_pair(samples: int) -> list[float]:
    """p50 (µs) of one bucket choice: Synapse's own hook called directly with
    its choice kept per length, and the same hook through pluggy."""
    runner, worker, call = steps_rig()
    direct = selection_of(worker, runner.plugins)
    hooked = through_pluggy(direct, runner.plugins, worker.spec).select
    length = call.plan.longest.length
    return _sync_pair([lambda: direct.select(length), lambda: hooked(length)], samples)


def steps_rig() -> tuple[CallRunner, Worker, Call]:
    """A call runner, a worker that has said hello, and a one-text call."""
    plugins = PluginHost(rig.plugins())
    entry = Catalog(rig.config(), plugins).entry(rig.MODEL, "embed")
    assert entry.lane is not None and entry.transport is not None
    worker = Worker(
        "bench#1", entry.spec, entry.transport.transport, entry.tokenizer, Lane(entry.lane, 1)
    )
    worker.hello = Hello(
        1,
        "mock",
        "0",
        rig.MODEL,
        rig.PACKAGE,
        1,
        1,
        list(rig.BUCKETS),
        rig.DIMS,
        rig.MAX_BATCH,
        "bench",
    )
    runner = CallRunner(plugins, time.monotonic, anyio.CapacityLimiter(1), Backlog(), 8)
    call = Call.new(plan_call(entry, [rig.SHORT_TEXT]), Deadline.never(), anyio.Event())
    return runner, worker, call


def _sync_pair(calls: Sequence[Callable[[], object]], samples: int) -> list[float]:
    """p50 (µs per operation) of each call, alternating with a rotating start."""
    times: list[list[int]] = [[] for _ in calls]
    for i in range(samples):
        for j in range(len(calls)):
            k = (i + j) % len(calls)
            call = calls[k]
            start = time.perf_counter_ns()
            for _ in range(PIECE_BATCH):
                call()
            times[k].append(time.perf_counter_ns() - start)
    return [statistics.median(t) / 1_000 / PIECE_BATCH for t in times]
