"""The supervisor's grant path, driven directly on the in-process mock.

``grant_release_us`` is one ``Supervisor.lease`` + ``Supervisor.release``
cycle on a warm shape: the admission check finds the shape admitted, the
locked grant decision charges a lease, the release returns it. A cold
admission (an ``Admit`` exchange with the in-process worker, then the grant)
is timed once per repetition on a shape never admitted before and reported
apart. The floor is an awaited no-op coroutine in the same loop.
"""

from __future__ import annotations

import itertools
import time

import anyio

from synapse_core.deadline import Deadline
from synapse_core.opening import open_host
from synapse_core.wire import Shape
from synapse_mock_transport.inprocess import InProcessTransport

from . import rig
from .harness import Figure, Mode, Series, Target


def measure(mode: Mode) -> list[Figure]:
    series: Series = anyio.run(_measure, mode)
    return [
        Figure(
            "grant_release_us",
            "us",
            "Supervisor.lease + release on a warm shape, in process",
            series["cycle_us"],
            Target("<=", 10.0),
            series.medians("noop_await_us"),
        ),
        Figure(
            "grant_admit_cold_us",
            "us",
            "first lease of a new shape (Admit exchange with the in-process worker) + release",
            series["admit_cold_us"],
        ),
    ]


async def _measure(mode: Mode) -> Series:
    series = Series()
    async with open_host(rig.config(), plugins=rig.plugins(InProcessTransport())) as host:
        worker = await rig.warm(host, calls=1)
        assert worker.hello is not None
        supervisor = host.supervisors[worker.lane.lane_id]
        warm = Shape(rig.smallest_fit(4), worker.hello.max_batch)
        assert warm in worker.shapes
        never = Deadline.never()
        fresh = (
            Shape(bucket, batch)
            for batch in range(1, worker.hello.max_batch)
            for bucket in worker.hello.buckets
        )
        cycles = mode.grant_cycles

        async def noop() -> None:
            return None

        for shape in itertools.islice(fresh, mode.repetitions):
            start = time.perf_counter_ns()
            lease = await supervisor.lease(worker, shape, never)
            supervisor.release(lease)
            admit_cold_us = (time.perf_counter_ns() - start) / 1e3

            start = time.perf_counter_ns()
            for _ in range(cycles):
                lease = await supervisor.lease(worker, warm, never)
                supervisor.release(lease)
            cycle_us = (time.perf_counter_ns() - start) / 1e3 / cycles

            start = time.perf_counter_ns()
            for _ in range(cycles):
                await noop()
            noop_us = (time.perf_counter_ns() - start) / 1e3 / cycles
            series.add(admit_cold_us=admit_cold_us, cycle_us=cycle_us, noop_await_us=noop_us)
    return series
