"""One short embed on a warm worker: against a bare exchange and a process pool.

Per repetition, three phases. ``host.embed`` of one short text and a bare
framed exchange of the same tokens on the same worker's channel (no host, no
supervisor) are sampled alternately, call by call. Then blocks of
``host.embed`` alternate with blocks of ``ProcessPoolExecutor`` calls running
the same embedding function (tokenise, then the mock worker's
``embed_tokens``), ten of each. Then ``host.embed``, an essentials-only path
(:class:`benchmarks.rig.EssentialsPath`) and the bare exchange alternate call
by call: the host's bookkeeping is the difference of the first two. Last,
where the platform can pin processes, host and bare calls alternate again
with this process and the worker on one CPU (:mod:`benchmarks.pinning`):
their difference is then the host's own CPU time per call, without the
wake-ups between cores that move every other p50 here. The
pool's blocking ``result()`` runs on the event-loop thread, which is idle
then, so the pool pays no thread hop it would not pay anyway.
"""

from __future__ import annotations

import multiprocessing
import statistics
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack

import anyio

from synapse_core.opening import open_host
from synapse_core.tokenizer import BasicTokenizer
from synapse_core.wire import Shape
from synapse_mock_transport.logic import embed_tokens

from . import rig, shortcut_switches
from .harness import Figure, Mode, Series, Target, blocked_p50, rotating_p50
from .pinning import one_cpu

#: pool blocks and host blocks per repetition
LATENCY_BLOCKS = 10


def embed_texts(texts: list[str], dims: int) -> list[list[float]]:
    """The embedding the mock worker computes, plus the host's tokenisation."""
    tokenizer = BasicTokenizer()
    return [embed_tokens(tokenizer.encode(text), dims) for text in texts]


def start_pool() -> ProcessPoolExecutor:
    """A one-process pool, started and warm before any event loop runs."""
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    for _ in range(20):
        pool.submit(embed_texts, [rig.SHORT_TEXT], rig.DIMS).result()
    return pool


def measure(mode: Mode, backend: str) -> list[Figure]:
    with start_pool() as pool:
        series: Series = anyio.run(_measure, mode, pool, backend=backend)
    suffix = "" if backend == "asyncio" else f"_{backend}"
    parts = series.medians("host_p50_us", "raw_p50_us", "host_beside_pool_p50_us", "pool_p50_us")
    # The host's p50 moves with the stretch of machine time it is sampled in;
    # the pool against the host calls of the host/bare phase, for comparison.
    parts["pool_over_host_of_host_bare_phase"] = statistics.median(
        series.ratio("pool_p50_us", "host_p50_us")
    )
    figures = [
        Figure(
            "overhead_ratio_vs_raw" + suffix,
            "ratio",
            f"host.embed p50 / bare framed exchange p50, one short text ({backend})",
            series.ratio("host_p50_us", "raw_p50_us"),
            Target("<=", 1.25) if not suffix else None,
            parts,
        ),
        Figure(
            "speedup_vs_processpool" + suffix,
            "ratio",
            f"ProcessPoolExecutor p50 / host.embed p50, one short text ({backend})",
            series.ratio("pool_p50_us", "host_beside_pool_p50_us"),
            Target(">=", 2.0) if not suffix else None,
            parts,
        ),
        Figure(
            "host_bookkeeping_us" + suffix,
            "us",
            "host.embed p50 minus the p50 of the same work without permit, guard, lease, "
            f"plan or call record, one short text ({backend})",
            series.difference("host_beside_essentials_p50_us", "essentials_p50_us"),
            None,
            {
                **series.medians("host_beside_essentials_p50_us", "essentials_p50_us"),
                "essentials_over_raw": statistics.median(
                    series.ratio("essentials_p50_us", "raw_beside_essentials_p50_us")
                ),
            },
        ),
    ]
    return figures + _one_cpu_figures(series, suffix, backend)


def _one_cpu_figures(series: Series, suffix: str, backend: str) -> list[Figure]:
    if "host_one_cpu_p50_us" not in series:
        return []  # this platform cannot pin processes
    return [
        Figure(
            "host_overhead_one_cpu_us" + suffix,
            "us",
            "host.embed p50 minus bare framed exchange p50, one short text, this process and "
            f"the worker pinned to one CPU ({backend})",
            series.difference("host_one_cpu_p50_us", "raw_one_cpu_p50_us"),
            None,
            {
                **series.medians("host_one_cpu_p50_us", "raw_one_cpu_p50_us"),
                "host_over_raw_one_cpu": statistics.median(
                    series.ratio("host_one_cpu_p50_us", "raw_one_cpu_p50_us")
                ),
            },
        )
    ]


async def _measure(mode: Mode, pool: ProcessPoolExecutor) -> Series:
    series = Series()
    with ExitStack() as stack:
        return await _sample(mode, pool, series, stack)


async def _sample(
    mode: Mode, pool: ProcessPoolExecutor, series: Series, stack: ExitStack
) -> Series:
    async with (
        open_host(rig.config(), plugins=rig.plugins()) as host,
        anyio.create_task_group() as tg,
    ):
        # ``--without NAME``: the whole group with a speed shortcut switched off.
        stack.enter_context(shortcut_switches.switched_off(host, sorted(shortcut_switches.WITHOUT)))
        worker = await rig.warm(host)
        assert worker.channel is not None and worker.hello is not None
        bare = rig.BareExchange(worker.channel)
        essentials = rig.EssentialsPath(host, worker)
        tg.start_soon(essentials.reader)
        tokens = [worker.tokenizer.encode(rig.SHORT_TEXT)]
        length = worker.tokenizer.sequence_length(tokens[0])
        shape = Shape(rig.smallest_fit(length), worker.hello.max_batch)
        texts = [rig.SHORT_TEXT]

        async def via_host() -> None:
            await host.embed(rig.MODEL, texts)

        async def via_bare() -> None:
            await bare.infer(shape, tokens)

        async def via_essentials() -> None:
            await essentials.embed(rig.SHORT_TEXT)

        async def via_pool() -> None:
            pool.submit(embed_texts, texts, rig.DIMS).result()

        for _ in range(mode.repetitions):
            # Each ratio's two sides are sampled together, in conditions
            # shared by both. Host and bare calls alternate call by call, with
            # the pool idle. The pool cannot alternate call by call: its feeder
            # and result threads stay busy for a while after each call and
            # would slow whichever call came next. So it runs in blocks that
            # alternate with blocks of host calls, and a slow stretch of the
            # machine falls on both sides of the speedup.
            host_us, raw_us = await rotating_p50([via_host, via_bare], mode.latency_samples)
            host_beside_pool_us, pool_us = await blocked_p50(
                [[via_host], [via_pool]], mode.latency_samples, LATENCY_BLOCKS
            )
            # What the host's bookkeeping costs, against the same work without
            # it; the bare exchange alongside, to place that work.
            host_beside_essentials_us, essentials_us, raw_beside_essentials_us = await rotating_p50(
                [via_host, via_essentials, via_bare], mode.latency_samples
            )
            series.add(
                host_p50_us=host_us,
                raw_p50_us=raw_us,
                host_beside_essentials_p50_us=host_beside_essentials_us,
                essentials_p50_us=essentials_us,
                raw_beside_essentials_p50_us=raw_beside_essentials_us,
                host_beside_pool_p50_us=host_beside_pool_us,
                pool_p50_us=pool_us,
            )
        # Pinned last, so that no other phase meets processes the scheduler
        # still keeps together after their affinity is given back.
        assert worker.process is not None and worker.process.pid is not None
        with one_cpu(worker.process.pid) as pinned:
            for _ in range(mode.repetitions if pinned else 0):
                host_us, raw_us = await rotating_p50([via_host, via_bare], mode.latency_samples)
                series.add(host_one_cpu_p50_us=host_us, raw_one_cpu_p50_us=raw_us)
        tg.cancel_scope.cancel()
    return series
