"""The serving path's speed shortcuts, each measured with and without itself.

Every shortcut adds state that must be reasoned about on both backends, so
each must show what it buys. Two kinds of figure, both ratios of the path
without the shortcut over the path with it, sampled in the same run:

- **the piece alone** (a tight loop of what the shortcut replaces), call by
  call alternating with and without; ``..._piece_ratio``;
- **a whole call**: ``host.embed`` of one short text on a warm subprocess
  worker, with the shortcut switched off for some blocks of calls and on for
  the blocks between them (as the latency group measures it; the bare
  exchange rotates with each side, so each side also has its own
  host/bare ratio); ``..._call_ratio`` and ``..._call_us`` (the p50
  difference).

The shortcuts, and what stands in for each when it is switched off:

- ``future_event``: the per-call hand-off events are bare asyncio futures
  (:class:`synapse_core.handoff.FutureEvent`); without, ``anyio.Event``.
  asyncio only by design: trio always uses anyio's event.
- ``runner_pool``: the detached task of a call is a parked task woken for
  it (``host._Runners``); without, a task started per call.
- ``remembered_buckets``: the bucket choice is worked out once per worker
  hello and plugin set (``Worker.selection``); without, every call asks the
  plugins for a selector again.
- ``head_start``: the caller takes permit, guard, lease and channel turn and
  writes the first request before the detached task wakes
  (``CallRunner.start``); without, the detached task takes everything.
- ``direct_bucket_hook``: with only Synapse's own bucket hook registered,
  it is called directly and its choice kept per length; without, every
  sequence's bucket is asked of pluggy's hook caller.

``python -m benchmarks --only latency --without NAME`` runs the latency
group with a shortcut switched off (see :func:`switched_off`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import anyio
from anyio.abc import TaskGroup

from synapse_core.call import Call
from synapse_core.catalog import Catalog
from synapse_core.config import ModelSpec
from synapse_core.deadline import Deadline
from synapse_core.handoff import FutureEvent, OneShot, event_factory
from synapse_core.host import Host, _Runners, open_host
from synapse_core.plan import plan_call
from synapse_core.plugins import PluginHost
from synapse_core.residency.lane import Backlog, Lane
from synapse_core.residency.worker import Selection, Worker
from synapse_core.serving import CallRunner
from synapse_core.wire import Hello, Shape

from . import rig
from .harness import Figure, Mode, Series, blocked_p50, rotating_p50

SHORTCUTS = (
    "future_event",
    "runner_pool",
    "remembered_buckets",
    "head_start",
    "direct_bucket_hook",
)
#: an A/A pair: both sides are the same path, so its ratio shows what noise
#: and the sampling order alone make of a whole-call figure
CONTROL = "control"
BACKENDS = ("asyncio", "trio")
#: blocks of calls each side gets per repetition of a whole-call figure
CALL_BLOCKS = 10
#: operations per sample of a piece's figure (one is too short to time)
PIECE_BATCH = 20

#: the shortcuts ``python -m benchmarks --without`` switches off
WITHOUT: set[str] = set()


def applies(name: str, backend: str) -> bool:
    return name != "future_event" or backend == "asyncio"


class Switch:
    """Turns one shortcut of one host on and off between calls.

    Both directions are plain attribute assignments made inside the timed
    call, so neither side pays for switching more than the other.
    """

    def __init__(self, name: str, host: Host, worker: Worker) -> None:
        runners, runner = host._runners, host._runner
        self.name = name
        self.on: Callable[[], None]
        self.off: Callable[[], None]
        if name == CONTROL:
            self.on = self.off = lambda: setattr(worker, "selection", worker.selection)
        elif name == "future_event":
            factory = runners.event
            self.on = lambda: setattr(runners, "event", factory)
            self.off = lambda: setattr(runners, "event", anyio.Event)
        elif name == "runner_pool":
            pooled = runners.submit
            spawn = task_per_call(runners.tg, runner)
            self.on = lambda: setattr(runners, "submit", pooled)
            self.off = lambda: setattr(runners, "submit", spawn)
        elif name == "head_start":
            start = runner.start
            late = no_head_start(runner)
            self.on = lambda: setattr(runner, "start", start)
            self.off = lambda: setattr(runner, "start", late)
        elif name == "remembered_buckets":
            self.on = lambda: setattr(worker, "selection", worker.selection)
            self.off = lambda: setattr(worker, "selection", None)
        elif name == "direct_bucket_hook":
            direct = worker.selection
            assert direct is not None, "warm the worker first"
            hooked = through_pluggy(direct, host.plugins, worker.spec)
            self.on = lambda: setattr(worker, "selection", direct)
            self.off = lambda: setattr(worker, "selection", hooked)
        else:
            raise ValueError(f"unknown shortcut {name!r}; one of {', '.join(SHORTCUTS)}")


def task_per_call(tg: TaskGroup, runner: CallRunner) -> Callable[[tuple[Any, Any, Any]], None]:
    """``_Runners.submit`` without the pool: a new task for every call."""

    def submit(job: tuple[Any, Any, Any]) -> None:
        tg.start_soon(runner.run, *job, name="call runner")

    return submit


def no_head_start(runner: CallRunner) -> Callable[..., bool]:
    """``CallRunner.start`` without the head start: only the overload check
    stays in the caller's task; the detached task takes everything."""

    def start(call: Any, supervisor: Any, worker: Any) -> bool:
        runner.check_room()
        return True

    return start


def through_pluggy(selection: Selection, plugins: PluginHost, spec: ModelSpec) -> Selection:
    """``selection`` with every bucket asked of pluggy's hook caller."""
    hello = selection.hello

    def select(length: int) -> int:
        return plugins.select_bucket(length, hello.buckets, spec)

    return Selection(hello, selection.plugins_version, select, selection.ceiling)


def _patch(owner: object, attribute: str, value: object) -> Callable[[], None]:
    """Set ``owner.attribute`` to ``value``; return what puts it back."""
    had = attribute in vars(owner)
    old = vars(owner).get(attribute)
    setattr(owner, attribute, value)

    def undo() -> None:
        if had:
            setattr(owner, attribute, old)
        else:
            delattr(owner, attribute)

    return undo


@contextmanager
def switched_off(host: Host, names: Sequence[str]) -> Iterator[None]:
    """Keep ``names`` switched off for every call of ``host`` in the block
    (for the latency group's ``--without``)."""
    runners, runner = host._runners, host._runner
    saved: list[Callable[[], None]] = []
    for name in names:
        if name == "future_event":
            saved.append(_patch(runners, "event", anyio.Event))
        elif name == "runner_pool":
            saved.append(_patch(runners, "submit", task_per_call(runners.tg, runner)))
        elif name == "head_start":
            saved.append(_patch(runner, "start", no_head_start(runner)))
        elif name == "remembered_buckets":
            # Every worker forgets its choice as soon as it is made.
            saved.append(_patch(Worker, "remember", lambda _worker, selection: selection))
        elif name == "direct_bucket_hook":
            # As if a plugin had its own bucket hook: always ask pluggy.
            saved.append(_patch(host.plugins, "_only_default_buckets", False))
        else:
            raise ValueError(f"unknown shortcut {name!r}; one of {', '.join(SHORTCUTS)}")
    try:
        yield
    finally:
        for undo in reversed(saved):
            undo()


# -- the pieces alone -----------------------------------------------------------------


class _Echo:
    """A call runner whose detached work is only ending the call."""

    async def run(self, done: OneShot, _supervisor: object, _worker: object) -> None:
        done.set()


async def handoff_pair(
    samples: int, events: Sequence[Callable[[], OneShot]], pooled: Sequence[bool]
) -> list[float]:
    """p50 (µs per call) of the two hand-offs of a call (caller to detached
    task and back) with each (event factory, pooled runner) variant,
    alternating call by call. The detached task does nothing but end the call."""
    async with anyio.create_task_group() as tg:
        variants = [
            handoffs(tg, make_event, pool) for make_event, pool in zip(events, pooled, strict=True)
        ]
        for variant in variants:  # park a runner of each pool before timing
            await variant()
        times = await rotating_p50(variants, samples)
        tg.cancel_scope.cancel()
    return [t / PIECE_BATCH for t in times]


def handoffs(
    tg: TaskGroup, make_event: Callable[[], OneShot], pooled: bool
) -> Callable[[], Awaitable[None]]:
    """``PIECE_BATCH`` calls' hand-offs, each to a detached task that only
    ends the call: a parked one (``pooled``) or one started for it."""
    runners = _Runners(tg, cast(CallRunner, _Echo()), 64)
    runners.event = make_event
    submit: Callable[[Any], None] = (
        runners.submit if pooled else task_per_call(tg, cast(CallRunner, _Echo()))
    )

    async def calls() -> None:
        for _ in range(PIECE_BATCH):
            done = make_event()
            submit((done, None, None))
            await done.wait()

    return calls


def future_events() -> Callable[[], OneShot]:
    factory = event_factory()
    assert isinstance(factory(), FutureEvent), "asyncio only"
    return factory


def steps_pair(samples: int) -> list[float]:
    """p50 (µs) of ``CallRunner._steps`` for one short text, with the worker's
    remembered bucket choice and without it (asked again every call)."""
    runner, worker, call = steps_rig()
    runner._steps(call, worker)  # remembered from now on

    def remembered() -> object:
        worker.selection = worker.selection
        return runner._steps(call, worker)

    def asked_again() -> object:
        worker.selection = None
        return runner._steps(call, worker)

    return _sync_pair([remembered, asked_again], samples)


def bucket_pair(samples: int) -> list[float]:
    """p50 (µs) of one bucket choice: Synapse's own hook called directly with
    its choice kept per length, and the same hook through pluggy."""
    runner, worker, call = steps_rig()
    runner._steps(call, worker)
    direct = worker.selection
    assert direct is not None
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
    runner = CallRunner(plugins, time.monotonic, anyio.CapacityLimiter(1), Backlog(), 30.0, 8)
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


# -- whole calls ----------------------------------------------------------------------


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
    pieces = Series()
    for _ in range(mode.repetitions):
        remembered, asked = steps_pair(mode.latency_samples)
        direct, hooked = bucket_pair(mode.latency_samples)
        pieces.add(
            steps_remembered_us=remembered,
            steps_asked_again_us=asked,
            bucket_direct_us=direct,
            bucket_pluggy_us=hooked,
        )
    figures.append(
        _piece(
            "remembered_buckets",
            "",
            pieces,
            "steps_asked_again_us",
            "steps_remembered_us",
            "CallRunner._steps of one short text: selector asked again / remembered",
        )
    )
    figures.append(
        _piece(
            "direct_bucket_hook",
            "",
            pieces,
            "bucket_pluggy_us",
            "bucket_direct_us",
            "one bucket choice: through pluggy / direct with the choice kept",
        )
    )
    for backend in BACKENDS:
        suffix = "" if backend == "asyncio" else f"_{backend}"
        handoffs: Series = anyio.run(_handoffs_series, mode, backend, backend=backend)
        if backend == "asyncio":
            figures.append(
                _piece(
                    "future_event",
                    suffix,
                    handoffs,
                    "anyio_event_us",
                    "future_event_us",
                    "a call's two hand-offs: anyio.Event / FutureEvent (asyncio)",
                )
            )
        figures.append(
            _piece(
                "runner_pool",
                suffix,
                handoffs,
                "task_per_call_us",
                "pooled_us",
                f"a call's two hand-offs: a task per call / a parked task ({backend})",
            )
        )
        names = [CONTROL, *(n for n in SHORTCUTS if applies(n, backend))]
        calls: dict[str, Series] = anyio.run(call_pairs, mode, names, backend, backend=backend)
        for name, series in calls.items():
            figures.append(_call(name, suffix, series, backend))
    return figures


async def _handoffs_series(mode: Mode, backend: str) -> Series:
    series = Series()
    samples = max(mode.latency_samples // 4, 10)
    for _ in range(mode.repetitions):
        if backend == "asyncio":
            future, anyio_event, spawned = await handoff_pair(
                samples, [future_events(), anyio.Event, future_events()], [True, True, False]
            )
            series.add(future_event_us=future, anyio_event_us=anyio_event)
            series.add(pooled_us=future, task_per_call_us=spawned)
        else:
            pooled, spawned = await handoff_pair(samples, [anyio.Event, anyio.Event], [True, False])
            series.add(pooled_us=pooled, task_per_call_us=spawned)
    return series


def _piece(name: str, suffix: str, series: Series, without: str, with_: str, what: str) -> Figure:
    return Figure(
        f"shortcut_{name}_piece_ratio{suffix}",
        "ratio",
        what,
        series.ratio(without, with_),
        None,
        {
            **series.medians(without, with_),
            "gain_us": statistics.median(
                [a - b for a, b in zip(series[without], series[with_], strict=True)]
            ),
        },
    )


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
