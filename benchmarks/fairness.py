"""Fair sharing of a model: short calls while a bulk call runs, on MiniLM.

The entries have no transport options, so they run the CPU lane's default
runtime (onnxruntime, numpy only where onnxruntime cannot be imported; the
figures name the runtime that served them, from the reply's identity) with
its default ``max_batch_tokens`` (350 positions on onnxruntime, 210 on
numpy). :data:`MODEL` is the shipped ``minilm`` entry as it is, served by
two workers (``workers = 2``), so a short call goes to the worker the bulk
call is not on; :data:`ONE` is the same entry on one worker.
One repetition measures, interleaved:

- single short calls alone on MODEL: one after another (their p99), and at
  the fixed rate below (their p99: a call every 50 ms takes several times
  as long as one sent right after another, docs/performance.md);
- one bulk call of long texts (near the 256 ceiling) alone (its wall time);
- the same bulk call while a client sends single short calls at a fixed
  rate (:data:`SHORTS_PER_S`, each in its own task, whether or not the last
  is back) until it ends: the targets' side;
- the same bulk call while a client sends short calls one after another,
  each as soon as the last is answered, first to MODEL's other worker, then
  on ONE (where the shorts share the bulk call's one worker): reported.

``fairness_short_p99_ratio`` is the fixed-rate shorts' p99 beside the bulk
call over their p99 alone at the same rate; ``fairness_bulk_ratio`` the
bulk call's wall time beside them over alone. The closed-loop sides show why the rate is
fixed: a client that sends its next short call at once takes what the bulk
call would have had (a second worker: up to a core of two), or, on one
worker, waits behind one long text's forward pass every time (a request is
not interrupted and holds at least one text). docs/performance.md has the
arithmetic.

Skipped (no figures) where synapse-cpu or the model wheel is not installed.
The numpy figures of earlier runs are in docs/performance.md.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import attrs

from synapse_core.deadline import Deadline
from synapse_core.host import Host
from synapse_core.opening import open_host
from synapse_core.testing import host_config

from . import cpu
from .harness import Figure, Mode, Series, Target, skipped

#: the shipped minilm entry (two workers): the targets' model
MODEL = "fair"
#: the same model files served by one worker: the reported one-worker side
ONE = "fair-one"
DEADLINE_S = 600.0
#: words of a long text: about 230 tokens with MiniLM's tokenizer, bucket 256
LONG_WORDS = 220
#: the fixed-rate client's calls a second: each costs the bulk call a few
#: milliseconds of a core, so the bulk call's ratio stays near 1
SHORTS_PER_S = 20.0

#: a client of short calls: told when the bulk call is done, it adds each
#: short call's time (ms) that ended before then
Client = Callable[[anyio.Event, list[float]], Coroutine[Any, Any, None]]


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
    #: short calls sent at the fixed rate alone per repetition
    rate_alone_samples: int = 120


PLANS = {
    "smoke": Plan(2, 2, 5, 20, 1, 5),
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


def _shorts_figure(
    name: str, series: Series, side: str, what: str, target: Target | None, alone: str = "alone"
) -> Figure:
    return Figure(
        name,
        "ratio",
        what,
        series.ratio(f"{side}_short_p99_ms", f"{alone}_short_p99_ms"),
        target,
        series.medians(
            f"{side}_short_p99_ms",
            f"{alone}_short_p99_ms",
            f"{side}_short_p50_ms",
            f"{alone}_short_p50_ms",
            f"{side}_shorts",
        ),
    )


def _bulk_figure(name: str, series: Series, side: str, what: str, target: Target | None) -> Figure:
    return Figure(
        name,
        "ratio",
        what,
        series.ratio(f"{side}_bulk_s", "alone_bulk_s"),
        target,
        series.medians(f"{side}_bulk_s", "alone_bulk_s", "one_long_text_ms"),
    )


def measure(mode: Mode) -> list[Figure]:
    if skipped("fairness group", cpu.available()):
        return []
    plan = PLANS[mode.name]
    series, runtime = anyio.run(_measure, plan)
    bulk = f"one {plan.bulk_texts}-long-text call"
    rate = f"{SHORTS_PER_S:g} a second"
    return [
        _shorts_figure(
            "fairness_short_p99_ratio",
            series,
            "rate",
            f"p99 of single short calls sent at {rate} while {bulk} runs / their p99 alone, "
            f"sent at the same rate (MiniLM, {runtime}, the model served by two workers)",
            Target("<=", 3.0),
            alone="rate_alone",
        ),
        _bulk_figure(
            "fairness_bulk_ratio",
            series,
            "rate",
            f"wall of {bulk} beside short calls at {rate} / alone (two workers)",
            Target("<=", 1.3),
        ),
        # A client that sends at once, as fast as it is answered: reported.
        _shorts_figure(
            "fairness_closed_short_p99_ratio",
            series,
            "closed",
            f"p99 of short calls sent one after another while {bulk} runs / alone (two workers)",
            None,
        ),
        _bulk_figure(
            "fairness_closed_bulk_ratio",
            series,
            "closed",
            f"wall of {bulk} beside short calls sent one after another / alone (two workers)",
            None,
        ),
        _shorts_figure(
            "fairness_one_worker_short_p99_ratio",
            series,
            "one",
            f"p99 of short calls sent one after another while {bulk} runs / alone "
            "(the model served by one worker)",
            None,
        ),
        _bulk_figure(
            "fairness_one_worker_bulk_ratio",
            series,
            "one",
            f"wall of {bulk} beside short calls sent one after another / alone (one worker)",
            None,
        ),
    ]


async def _measure(plan: Plan) -> tuple[Series, str]:
    """The figures, and the runtime that served them."""
    series = Series()
    config = host_config(
        cpu.shipped(MODEL), {**cpu.shipped(ONE), "workers": 1}, exchange_timeout_s=120.0
    )
    bulk = long_texts(plan.bulk_texts)
    async with open_host(config, plugins=cpu.plugins()) as host:
        await host.load(MODEL)
        warm = [cpu.SHORT, *bulk[:2]]  # both shapes
        async with anyio.create_task_group() as tg:  # one call on each worker
            for _ in range(2):
                tg.start_soon(host.embed, MODEL, warm)
        identity = (await host.embed(ONE, warm, deadline=_deadline())).identity
        # Each worker makes a session per thread share on first use: both
        # shares of both workers are made before anything is timed.
        warm_plan = attrs.evolve(plan, most_shorts=20)
        for model in (MODEL, ONE):
            client = _one_after_another(host, model, warm_plan)
            await _bulk_beside(host, model, bulk[:4], client, timed=False)
        # A sparse short call marks nothing, so two at once on the two
        # workers each run on every core: the share a short call gets
        # beside a bulk call between its requests.
        await anyio.sleep(0.05)
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(host.embed, MODEL, [cpu.SHORT])
        sides = [_alone, _fixed_rate, _closed_loop, _one_worker]
        for rep in range(plan.repetitions):
            out = {"one_long_text_ms": await _one_long_text_ms(host, bulk[0], plan)}
            for side in sides[rep % 4 :] + sides[: rep % 4]:
                out.update(await side(host, bulk, plan))
            series.add(**out)
    return series, runtime_of(identity)


def _deadline() -> Deadline:
    return Deadline.after(DEADLINE_S)


async def _short_ms(host: Host, model: str) -> float:
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


def _side(name: str, wall: float, shorts: list[float]) -> dict[str, float]:
    return {
        f"{name}_bulk_s": wall,
        f"{name}_short_p99_ms": p99(shorts),
        f"{name}_short_p50_ms": statistics.median(shorts),
        f"{name}_shorts": float(len(shorts)),
    }


async def _alone(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    shorts = [await _short_ms(host, MODEL) for _ in range(plan.short_samples)]
    at_rate: list[float] = []
    await _at_rate(host, anyio.Event(), at_rate, plan.rate_alone_samples)
    start = time.perf_counter()
    await host.embed(MODEL, bulk, deadline=_deadline())
    wall = time.perf_counter() - start
    return {**_side("alone", wall, shorts), **_side("rate_alone", wall, at_rate)}


async def _at_rate(host: Host, done: anyio.Event, shorts: list[float], most: int) -> None:
    """Open loop: the k-th of at most ``most`` short calls starts at k / rate,
    in a task of its own, until ``done``."""
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for k in range(most):
            await anyio.sleep_until(start + k / SHORTS_PER_S)
            if done.is_set():
                break
            tg.start_soon(_timed_short, host, MODEL, done, shorts)


async def _fixed_rate(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    async def client(done: anyio.Event, shorts: list[float]) -> None:
        await _at_rate(host, done, shorts, plan.most_shorts)

    return _side("rate", *await _bulk_beside(host, MODEL, bulk, client))


async def _closed_loop(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    return _side(
        "closed", *await _bulk_beside(host, MODEL, bulk, _one_after_another(host, MODEL, plan))
    )


async def _one_worker(host: Host, bulk: list[str], plan: Plan) -> dict[str, float]:
    return _side("one", *await _bulk_beside(host, ONE, bulk, _one_after_another(host, ONE, plan)))


async def _timed_short(host: Host, model: str, done: anyio.Event, shorts: list[float]) -> None:
    took = await _short_ms(host, model)
    if not done.is_set():  # only shorts that ended while the bulk call ran count
        shorts.append(took)


def _one_after_another(host: Host, model: str, plan: Plan) -> Client:
    async def client(done: anyio.Event, shorts: list[float]) -> None:
        while not done.is_set() and len(shorts) < plan.most_shorts:
            await _timed_short(host, model, done, shorts)

    return client


async def _bulk_beside(
    host: Host, model: str, bulk: list[str], client: Client, *, timed: bool = True
) -> tuple[float, list[float]]:
    """The bulk call's wall time on ``model``, and the times of the short
    calls ``client`` sent (to the same model) while it ran (``timed=False``:
    a warm-up, where none may have ended in time)."""
    shorts: list[float] = []
    done = anyio.Event()
    wall = 0.0

    async def run_bulk() -> None:
        nonlocal wall
        start = time.perf_counter()
        await host.embed(model, bulk, deadline=_deadline())
        wall = time.perf_counter() - start
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_bulk)
        await anyio.sleep(0)  # the bulk call's first request goes first
        tg.start_soon(client, done, shorts)
    if timed and not shorts:
        raise RuntimeError("no short call ended while the bulk call ran")
    return wall, shorts


__all__ = ["measure"]
