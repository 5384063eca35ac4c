"""The serving path's speed shortcuts, each measured with and without itself.

Every shortcut adds state that must be reasoned about on both backends, so
each must show what it buys: ``host.embed`` of one short text on a warm
subprocess worker, with the shortcut switched off for some blocks of calls
and on for the blocks between them (as the latency group measures it; the
bare exchange rotates with each side, so each side also has its own
host/bare ratio). The figures are ratios of the call without the shortcut
over the call with it, sampled in the same run: ``..._call_ratio`` and
``..._call_us`` (the p50 difference), beside a ``control`` pair whose two
sides are the same path.

The one shortcut left, and what stands in for it when it is switched off:

- ``head_start``: the caller takes permit, guard, lease and channel turn and
  writes the first request before the detached task runs (before the
  call's record, when all of it is free: ``CallRunner.try_begin``, then
  ``CallRunner.start``); without, the detached task takes everything.

The others measured here were removed for gaining less than 5% of a whole
call (docs/performance.md, *Speed shortcuts and what each buys*).
``python -m benchmarks --only latency --without head_start`` runs the
latency group with it switched off (see
:func:`benchmarks.shortcut_switches.switched_off`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from synapse_core.opening import open_host
from synapse_core.wire import Shape

from . import rig
from .harness import Figure, Mode, Series, blocked_p50
from .shortcut_switches import CONTROL, SHORTCUTS, Switch

BACKENDS = ("asyncio", "trio")
#: blocks of calls each side gets per repetition of a whole-call figure
CALL_BLOCKS = 10


async def call_pairs(mode: Mode, names: Sequence[str], backend: str) -> dict[str, Series]:
    """Per shortcut: host.embed p50 with and without it, and the bare
    exchange beside each side, ``mode.repetitions`` times."""
    found = {name: Series() for name in names}
    async with open_host(rig.config(), plugins=rig.plugins()) as host:
        worker = await rig.warm(host)
        assert worker.channel is not None and worker.hello is not None
        bare = rig.BareExchange(worker.channel)
        tokens = [worker.tokenizer.encode(rig.SHORT_TEXT)]
        shape = Shape(rig.smallest_fit(worker.tokenizer.sequence_length(tokens[0])), rig.MAX_BATCH)
        texts = [rig.SHORT_TEXT]
        switches = [Switch(name, host, worker) for name in names]

        def embed(flip: Callable[[], None]) -> Callable[[], Awaitable[None]]:
            async def call() -> None:
                flip()
                await host.embed(rig.MODEL, texts)

            return call

        async def via_bare() -> None:
            await bare.infer(shape, tokens)

        # Half the blocks with the shortcut on first, half with it off first
        # (A B A B ..., then B A B A ...): the side sampled second in a block
        # is not always the same one. Each side's p50 is the mean of its halves.
        half = CALL_BLOCKS // 2
        samples = max(mode.latency_samples // (2 * half) * half, half)
        for _ in range(mode.repetitions):
            for switch in switches:
                with_it = [embed(switch.on), via_bare]
                without = [embed(switch.off), via_bare]
                first = await blocked_p50([with_it, without], samples, half)
                second = await blocked_p50([without, with_it], samples, half)
                second = second[2:] + second[:2]
                on_us, bare_on_us, off_us, bare_off_us = (
                    (a + b) / 2 for a, b in zip(first, second, strict=True)
                )
                switch.on()
                found[switch.name].add(
                    on_p50_us=on_us,
                    off_p50_us=off_us,
                    bare_beside_on_p50_us=bare_on_us,
                    bare_beside_off_p50_us=bare_off_us,
                    on_over_bare=on_us / bare_on_us,
                    off_over_bare=off_us / bare_off_us,
                    gain_us=off_us - on_us,
                )
    return found


def measure(mode: Mode) -> list[Figure]:
    figures: list[Figure] = []
    for backend in BACKENDS:
        suffix = "" if backend == "asyncio" else f"_{backend}"
        names = [CONTROL, *SHORTCUTS]
        calls: dict[str, Series] = anyio.run(call_pairs, mode, names, backend, backend=backend)
        for name, series in calls.items():
            figures.append(_call(name, suffix, series, backend))
    return figures


def _call(name: str, suffix: str, series: Series, backend: str) -> Figure:
    what = (
        "host.embed p50 of one short text, the same path on both sides (A/A)"
        if name == CONTROL
        else f"host.embed p50 of one short text without {name} / with it"
    )
    return Figure(
        f"shortcut_{name}_call_ratio{suffix}",
        "ratio",
        f"{what} ({backend})",
        series.ratio("off_p50_us", "on_p50_us"),
        None,
        series.medians("on_p50_us", "off_p50_us", "gain_us", "on_over_bare", "off_over_bare"),
    )
