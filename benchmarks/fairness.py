"""Fair sharing of a worker: short calls while a bulk call runs, on MiniLM.

The entry has no options, so it runs the CPU lane's default runtime
(onnxruntime, numpy only where onnxruntime cannot be imported; the figures
name the runtime that served them, from the reply's identity) with its
default ``max_batch_tokens`` (350 positions on onnxruntime, 210 on numpy).
One repetition measures, on one host and one worker, interleaved:

- single short calls alone, one after another (their p99);
- one bulk call of long texts (near the 256 ceiling) alone (its wall time);
- the same bulk call while one client sends single short calls one after
  another until it ends (the shorts' p99, the bulk call's wall time).

``fairness_short_p99_ratio`` is the shorts' p99 beside the bulk call over
their p99 alone; ``fairness_bulk_ratio`` the bulk call's wall time beside the
shorts over alone. A short call waits for at most the one request of the bulk
call under way, so the first ratio's floor is about (one request + one short
call) / one short call: the parts give one long text's forward time, the
smallest request a bulk call of long texts can make.

A third side, reported without a target, measures what serving the model by
two workers would give: a second entry of the same model files
(:data:`SPARE`, its own worker on the same cores) takes the short calls,
alone and beside the same bulk call on the first
(``fairness_spare_short_p99_ratio``, ``fairness_spare_bulk_ratio``; the
bulk call's time alone is the first side's). The host sends every call of
one model to its one worker, so this is two entries here, not one model.

Skipped (no figures) where synapse-cpu or the model wheel is not installed.
The numpy figures of earlier runs are in docs/performance.md.
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
#: a second entry of the same model files: its own worker, for the short calls
#: of the spare-worker figures
SPARE = "fair-spare"
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


def runtime_of(identity: str) -> str:
    """The runtime a CPU worker's identity names (``cpu:<name>:<kind>:<sha>:<runtime>``)."""
    return identity.rsplit(":", 1)[-1]


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
    series, runtime = anyio.run(_measure, plan)
    bulk = f"one {plan.bulk_texts}-long-text call"
    return [
        Figure(
            "fairness_short_p99_ratio",
            "ratio",
            f"p99 of single short calls while {bulk} runs / their p99 alone "
            f"(MiniLM, {runtime}, one worker)",
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
            f"wall of {bulk} beside a client of single short calls / alone",
            series.ratio("bulk_beside_s", "bulk_alone_s"),
            Target("<=", 1.3),
            series.medians("bulk_beside_s", "bulk_alone_s"),
        ),
        # What a second worker for the model would give: reported, not targeted.
        Figure(
            "fairness_spare_short_p99_ratio",
            "ratio",
            f"p99 of single short calls to a second worker of the same model files while "
            f"{bulk} runs on the first / their p99 alone ({runtime}, cores shared)",
            series.ratio("spare_short_p99_beside_ms", "spare_short_p99_alone_ms"),
            None,
            series.medians(
                "spare_short_p99_beside_ms",
                "spare_short_p99_alone_ms",
                "spare_short_p50_beside_ms",
                "spare_short_p50_alone_ms",
                "spare_shorts_beside",
            ),
        ),
        Figure(
            "fairness_spare_bulk_ratio",
            "ratio",
            f"wall of {bulk} beside a client of single short calls to a second worker / alone",
            series.ratio("spare_bulk_beside_s", "bulk_alone_s"),
            None,
            series.medians("spare_bulk_beside_s", "bulk_alone_s"),
        ),
    ]


async def _measure(plan: Plan) -> tuple[Series, str]:
    """The figures, and the runtime that served them."""
    series = Series()
    config = host_config(cpu.entry(MODEL), cpu.entry(SPARE), exchange_timeout_s=120.0)
    bulk = long_texts(plan.bulk_texts)
    async with open_host(config, plugins=cpu.plugins()) as host:
        warm = await host.embed(MODEL, [cpu.SHORT, *bulk[:2]], deadline=_deadline())  # both shapes
        await host.embed(SPARE, [cpu.SHORT], deadline=_deadline())
        for rep in range(plan.repetitions):
            out = {"one_long_text_ms": await _one_long_text_ms(host, bulk[0], plan)}
            sides = [_alone, _beside, _spare]
            for side in sides[rep % 3 :] + sides[: rep % 3]:
                out.update(await side(host, bulk, plan))
            series.add(**out)
    return series, runtime_of(warm.identity)


def _deadline() -> Deadline:
    return Deadline.after(DEADLINE_S)


async def _short_ms(host: Host, model: str = MODEL) -> float:
    start = time.perf_counter()
    await host.embed(model, [cpu.SHORT], deadline=_deadline())
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
    wall, shorts = await _bulk_beside_shorts(host, bulk, plan, MODEL)
    return {
        "bulk_beside_s": wall,
        "short_p99_beside_ms": p99(shorts),
        "short_p50_beside_ms": statistics.median(shorts),
        "shorts_beside": float(len(shorts)),
    }


async def _spare(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    """The short calls on their own worker (the spare's alone, then beside)."""
    alone = [await _short_ms(host, SPARE) for _ in range(plan.short_samples)]
    wall, shorts = await _bulk_beside_shorts(host, bulk, plan, SPARE)
    return {
        "spare_bulk_beside_s": wall,
        "spare_short_p99_alone_ms": p99(alone),
        "spare_short_p50_alone_ms": statistics.median(alone),
        "spare_short_p99_beside_ms": p99(shorts),
        "spare_short_p50_beside_ms": statistics.median(shorts),
        "spare_shorts_beside": float(len(shorts)),
    }


async def _bulk_beside_shorts(
    host: Host, bulk: list[str], plan: Plan, short_model: str
) -> tuple[float, list[float]]:
    """The bulk call's wall time on :data:`MODEL`, and the times of the short
    calls to ``short_model`` that one client sent one after another meanwhile."""
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
            took = await _short_ms(host, short_model)
            if not done.is_set():
                shorts.append(took)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_bulk)
        await anyio.sleep(0)  # the bulk call's first request goes first
        tg.start_soon(client)
    if not shorts:
        raise RuntimeError("no short call ended while the bulk call ran")
    return wall, shorts


__all__ = ["measure"]
