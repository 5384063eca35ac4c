"""Fair sharing of a worker: short calls while a bulk call runs, on MiniLM (numpy).

One repetition measures, on one host and one worker with the default catalog
options (so the transport's default ``max_batch_tokens``), interleaved:

- single short calls alone, one after another (their p99);
- one bulk call of long texts (near the 256 ceiling) alone (its wall time);
- the same bulk call while one client sends single short calls one after
  another until it ends (the shorts' p99, the bulk call's wall time).

``fairness_short_p99_ratio`` is the shorts' p99 beside the bulk call over
their p99 alone; ``fairness_bulk_ratio`` the bulk call's wall time beside the
shorts over alone. A short call waits for at most the one request of the bulk
call under way, so the first ratio's floor is about (one request + one short
call) / one short call: the parts give one long text's forward time, the
smallest request a bulk call of long texts can make. Skipped (no figures)
where synapse-cpu or the model wheel is not installed.
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import anyio
import attrs

from synapse_core.deadline import Deadline
from synapse_core.host import Host, open_host
from synapse_core.testing import host_config

from . import cpu
from .harness import Figure, Mode, Series, Target

MODEL = "fair"
DEADLINE_S = 600.0
#: words of a long text: about 230 tokens with MiniLM's tokenizer, bucket 256
LONG_WORDS = 220


@attrs.frozen
class Plan:
    repetitions: int
    #: texts of the bulk call
    bulk_texts: int
    #: short calls measured alone per repetition
    short_samples: int
    #: most short calls sent beside the bulk call (it bounds the run)
    most_shorts: int
    #: calls of one long text alone per repetition
    long_samples: int = 3


PLANS = {
    "smoke": Plan(2, 2, 5, 20, 1),
    "quick": Plan(1, 64, 100, 2_000),
    "full": Plan(3, 256, 300, 5_000),
}


def p99(samples: list[float]) -> float:
    """The 99th percentile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


def long_texts(count: int) -> list[str]:
    words = cpu._WORDS
    return [
        " ".join(words[(i * 7 + j) % len(words)] for j in range(LONG_WORDS)) for i in range(count)
    ]


def measure(mode: Mode) -> list[Figure]:
    missing = cpu.available()
    if missing:
        print(f"(fairness group skipped: {missing})", end=" ", file=sys.stderr, flush=True)
        return []
    plan = PLANS[mode.name]
    series: Series = anyio.run(_measure, plan)
    return [
        Figure(
            "fairness_short_p99_ratio",
            "ratio",
            f"p99 of single short calls while one {plan.bulk_texts}-long-text call runs / "
            "their p99 alone (MiniLM, numpy, one worker)",
            series.ratio("short_p99_beside_ms", "short_p99_alone_ms"),
            Target("<=", 3.0),
            series.medians(
                "short_p99_beside_ms",
                "short_p99_alone_ms",
                "short_p50_beside_ms",
                "short_p50_alone_ms",
                "shorts_beside",
                "one_long_text_ms",
            ),
        ),
        Figure(
            "fairness_bulk_ratio",
            "ratio",
            f"wall of one {plan.bulk_texts}-long-text call beside a client of single short "
            "calls / alone",
            series.ratio("bulk_beside_s", "bulk_alone_s"),
            Target("<=", 1.3),
            series.medians("bulk_beside_s", "bulk_alone_s"),
        ),
    ]


async def _measure(plan: Plan) -> Series:
    series = Series()
    config = host_config(cpu.entry(MODEL), exchange_timeout_s=120.0)
    bulk = long_texts(plan.bulk_texts)
    async with open_host(config, plugins=cpu.plugins()) as host:
        await host.embed(MODEL, [cpu.SHORT, *bulk[:2]], deadline=_deadline())  # both shapes
        for rep in range(plan.repetitions):
            out = {"one_long_text_ms": await _one_long_text_ms(host, bulk[0], plan)}
            sides = (_alone, _beside) if rep % 2 == 0 else (_beside, _alone)
            for side in sides:
                out.update(await side(host, bulk, plan))
            series.add(**out)
    return series


def _deadline() -> Deadline:
    return Deadline.after(DEADLINE_S)


async def _short_ms(host: Host) -> float:
    start = time.perf_counter()
    await host.embed(MODEL, [cpu.SHORT], deadline=_deadline())
    return (time.perf_counter() - start) * 1e3


async def _one_long_text_ms(host: Host, text: str, plan: Plan) -> float:
    times = []
    for _ in range(plan.long_samples):
        start = time.perf_counter()
        await host.embed(MODEL, [text], deadline=_deadline())
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


async def _alone(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    shorts = [await _short_ms(host) for _ in range(plan.short_samples)]
    start = time.perf_counter()
    await host.embed(MODEL, bulk, deadline=_deadline())
    return {
        "bulk_alone_s": time.perf_counter() - start,
        "short_p99_alone_ms": p99(shorts),
        "short_p50_alone_ms": statistics.median(shorts),
    }


async def _beside(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    shorts: list[float] = []
    done = anyio.Event()
    wall = 0.0

    async def run_bulk() -> None:
        nonlocal wall
        start = time.perf_counter()
        await host.embed(MODEL, bulk, deadline=_deadline())
        wall = time.perf_counter() - start
        done.set()

    async def client() -> None:
        # Only shorts sent while the bulk call runs count; the run is bounded.
        while not done.is_set() and len(shorts) < plan.most_shorts:
            took = await _short_ms(host)
            if not done.is_set():
                shorts.append(took)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_bulk)
        await anyio.sleep(0)  # the bulk call's first request goes first
        tg.start_soon(client)
    if not shorts:
        raise RuntimeError("no short call ended while the bulk call ran")
    return {
        "bulk_beside_s": wall,
        "short_p99_beside_ms": p99(shorts),
        "short_p50_beside_ms": statistics.median(shorts),
        "shorts_beside": float(len(shorts)),
    }


__all__ = ["measure"]
