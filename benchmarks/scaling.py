"""Throughput of 64 concurrent callers on one worker and spread over two,
and on one worker with coalescing on.

The two workers are two catalog entries of one package, so they are separate
processes with their own shapes. The mock emulates 2 ms of device time per
exchange (``faults.reply_delay_s``), so one worker tops out near 500 calls/s
and the first figure says whether the host keeps two of them busy. The
second says what coalescing buys the same 64 callers on one worker: their
one-text calls share requests instead of taking one exchange each.
"""

from __future__ import annotations

import time

import anyio

from synapse_core.host import Host
from synapse_core.opening import open_host

from . import rig
from .harness import Figure, Mode, Series, Target

CALLERS = 64
DEVICE_S = 0.002
MODELS = ("bench-a", "bench-b")


def measure(mode: Mode) -> list[Figure]:
    series: Series = anyio.run(_measure, mode)
    return [
        Figure(
            "throughput_scaling_2_workers",
            "ratio",
            f"calls/s of {CALLERS} callers over 2 workers / on 1 worker, {DEVICE_S * 1e3:g} ms "
            "device time per exchange",
            series.ratio("two_workers_calls_per_s", "one_worker_calls_per_s"),
            Target(">=", 1.6),
            series.medians("one_worker_calls_per_s", "two_workers_calls_per_s"),
        ),
        Figure(
            "throughput_coalesced_vs_not",
            "ratio",
            f"calls/s of {CALLERS} callers of one-text calls on 1 worker, coalesce on / off, "
            f"{DEVICE_S * 1e3:g} ms device time per exchange",
            series.ratio("coalesced_calls_per_s", "one_worker_calls_per_s"),
            Target(">=", 4.0),
            series.medians("coalesced_calls_per_s", "one_worker_calls_per_s"),
        ),
    ]


async def _measure(mode: Mode) -> Series:
    models = [rig.model(name, faults={"reply_delay_s": DEVICE_S}) for name in MODELS]
    series = Series()
    async with (
        open_host(rig.config(*models), plugins=rig.plugins()) as host,
        open_host(rig.config(*models, coalesce=True), plugins=rig.plugins()) as coalescing,
    ):
        for name in MODELS:
            await rig.warm(host, name, calls=3)
        await rig.warm(coalescing, MODELS[0], calls=3)
        for rep in range(mode.repetitions):
            rates = {}
            rounds = [("one", host, 1), ("two", host, 2), ("coalesced", coalescing, 1)]
            for key, subject, spread in rounds if rep % 2 == 0 else rounds[::-1]:
                rates[key] = await _round(subject, MODELS[:spread], mode.scaling_calls)
            series.add(
                one_worker_calls_per_s=rates["one"],
                two_workers_calls_per_s=rates["two"],
                coalesced_calls_per_s=rates["coalesced"],
            )
    return series


async def _round(host: Host, models: tuple[str, ...], calls: int) -> float:
    """Calls per second of :data:`CALLERS` callers, caller ``i`` on ``models[i % n]``."""
    texts = [rig.SHORT_TEXT]

    async def caller(index: int) -> None:
        name = models[index % len(models)]
        for _ in range(calls):
            await host.embed(name, texts)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(CALLERS):
            tg.start_soon(caller, index)
    return CALLERS * calls / (time.perf_counter() - start)
