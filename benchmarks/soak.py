"""What a long run leaves behind in the host process.

One host on the mock subprocess worker is warmed up, then serves
``soak_calls`` one-text calls in waves of concurrent callers (so the call
tasks running at once grow and shrink), then one call of ``soak_texts`` texts. Every
result is dropped as soon as it arrives. After each phase the host's resident
set size and the number of objects the garbage collector tracks are read,
and compared with their warm values.

The target: once results are dropped, RSS is back within 10% of its warm
value. The worker's memory is its own process and is not counted.
"""

from __future__ import annotations

import gc
import os

import anyio

from synapse_core.host import Host
from synapse_core.opening import open_host

from . import rig
from .harness import FULL, Figure, Mode, Series, Target
from .workers import rss_mib

#: concurrent callers per wave: more than max_concurrent, so some calls wait
WAVE = 500


def measure(mode: Mode) -> list[Figure]:
    series = Series()
    # The full soak is long (minutes): one run of it; shorter modes run two.
    for _ in range(1 if mode is FULL else 2):
        series.add(**anyio.run(_soak, mode))
    parts = (
        "rss_warm_mib",
        "rss_after_calls_mib",
        "rss_after_large_mib",
        "rss_peak_large_mib",
        "objects_warm",
        "objects_after_calls",
        "objects_after_large",
    )

    def rss_ratio(key: str, what: str, after: str) -> Figure:
        ratio = series.ratio(after, "rss_warm_mib")
        return Figure(key, "ratio", what, ratio, Target("<=", 1.10), series.medians(*parts))

    return [
        rss_ratio(
            "soak_rss_ratio_after_calls",
            f"host RSS after {mode.soak_calls} calls, results dropped / warm RSS",
            "rss_after_calls_mib",
        ),
        rss_ratio(
            "soak_rss_ratio_after_large_call",
            f"host RSS after one {mode.soak_texts}-text call, result dropped / warm RSS",
            "rss_after_large_mib",
        ),
        Figure(
            "soak_live_objects_growth",
            "objects",
            "objects tracked by the garbage collector after the soak minus warm",
            series.difference("objects_after_large", "objects_warm"),
            None,
            series.medians(*parts),
        ),
    ]


def _settled() -> tuple[float, float]:
    """RSS (MiB) and live objects once garbage is collected."""
    gc.collect()
    return rss_mib(os.getpid()), float(len(gc.get_objects()))


async def _calls(host: Host, count: int) -> None:
    async def one(i: int) -> None:
        await host.embed(rig.MODEL, [f"{rig.SHORT_TEXT} {i}"])  # the result is dropped

    done = 0
    while done < count:
        wave = min(WAVE, count - done)
        async with anyio.create_task_group() as tg:
            for i in range(done, done + wave):
                tg.start_soon(one, i)
        done += wave


async def _soak(mode: Mode) -> dict[str, float]:
    async with open_host(rig.config(), plugins=rig.plugins()) as host:
        await rig.warm(host)
        # Warm every path the soak takes once, so first-use allocations
        # (caches, a wave of call tasks, a large reply's buffers) count as warm.
        await _calls(host, min(WAVE, mode.soak_calls))
        await host.embed(rig.MODEL, [f"warm {i} words" for i in range(min(1_000, mode.soak_texts))])
        rss_warm, objects_warm = _settled()
        await _calls(host, mode.soak_calls)
        rss_calls, objects_calls = _settled()
        texts = [f"text number {i} of the large call" for i in range(mode.soak_texts)]
        result = await host.embed(rig.MODEL, texts)
        rss_peak = rss_mib(os.getpid())
        del result, texts
        rss_large, objects_large = _settled()
    return {
        "rss_warm_mib": rss_warm,
        "rss_after_calls_mib": rss_calls,
        "rss_after_large_mib": rss_large,
        "rss_peak_large_mib": rss_peak,
        "objects_warm": objects_warm,
        "objects_after_calls": objects_calls,
        "objects_after_large": objects_large,
    }
