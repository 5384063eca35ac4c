"""Run modes, figures and the samplers every benchmark group shares.

A figure holds one value per repetition; a repetition measures the subject and
its baseline together (interleaved call by call where both are latencies, in
alternating blocks where a side leaves threads busy behind it), so drift of the
machine hits both sides of a ratio alike.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal

import attrs


@attrs.frozen
class Mode:
    """How much to measure. ``smoke`` only proves that everything runs."""

    name: str
    repetitions: int
    #: calls per side per repetition of a latency figure
    latency_samples: int
    #: host and bare runs of the 1024-text composed call per repetition
    composed_pairs: int
    #: calls each of the 64 callers makes per repetition and configuration
    scaling_calls: int
    #: worker spawns per repetition
    cold_starts: int
    #: lease+release cycles per repetition
    grant_cycles: int
    #: calls of the soak, then texts of its one large call
    soak_calls: int = 50_000
    soak_texts: int = 100_000


QUICK = Mode("quick", 5, 1_000, 5, 8, 4, 20_000, soak_calls=5_000, soak_texts=10_000)
FULL = Mode("full", 15, 2_000, 5, 16, 6, 100_000)
SMOKE = Mode("smoke", 2, 20, 1, 1, 1, 200, soak_calls=200, soak_texts=500)

Op = Literal["<=", ">=", "=="]


@attrs.frozen
class Target:
    op: Op
    value: float
    #: what a ``==`` target is compared with, when it is another figure
    against: str = ""

    def met(self, value: float, reference: float | None = None) -> bool:
        goal = self.value if reference is None else reference
        if self.op == "<=":
            return value <= goal
        if self.op == ">=":
            return value >= goal
        return math.isclose(value, goal, rel_tol=1e-9, abs_tol=1e-12)

    def describe(self) -> str:
        if self.against:
            return f"= {self.against}"
        return f"{self.op} {self.value:g}"


@attrs.define
class Figure:
    """One reported number: a value per repetition plus what explains it."""

    key: str
    unit: str
    what: str
    values: list[float]
    target: Target | None = None
    #: medians over repetitions of the parts the figure is made of
    detail: dict[str, float] = attrs.field(factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def max(self) -> float:
        return max(self.values)


class Series:
    """Per-repetition measurements of named parts, summarised as medians."""

    def __init__(self) -> None:
        self.parts: dict[str, list[float]] = {}

    def add(self, **values: float) -> None:
        for name, value in values.items():
            self.parts.setdefault(name, []).append(value)

    def __getitem__(self, name: str) -> list[float]:
        return self.parts[name]

    def __contains__(self, name: object) -> bool:
        return name in self.parts

    def ratio(self, top: str, bottom: str) -> list[float]:
        return [a / b for a, b in zip(self.parts[top], self.parts[bottom], strict=True)]

    def difference(self, top: str, bottom: str) -> list[float]:
        return [a - b for a, b in zip(self.parts[top], self.parts[bottom], strict=True)]

    def medians(self, *names: str) -> dict[str, float]:
        return {name: statistics.median(self.parts[name]) for name in names}


def skipped(what: str, why: str) -> bool:
    """Whether ``what`` cannot run here: ``why`` is not empty (then said on
    stderr, beside the group's progress line)."""
    if why:
        print(f"({what} skipped: {why})", end=" ", file=sys.stderr, flush=True)
    return bool(why)


def now_ns() -> int:
    return time.perf_counter_ns()


def p50(samples_ns: Sequence[int]) -> float:
    """The median of nanosecond samples, in microseconds."""
    return statistics.median(samples_ns) / 1_000


async def rotating_p50(
    calls: Sequence[Callable[[], Awaitable[object]]], samples: int
) -> list[float]:
    """p50 (µs) of each call, sampled round-robin with a rotating start.

    Each sample runs every call once, starting with a different one each
    time, so neither side always runs first (warm caches, a just-woken peer).
    """
    return await blocked_p50([calls], samples, 1)


async def blocked_p50(
    groups: Sequence[Sequence[Callable[[], Awaitable[object]]]],
    samples: int,
    blocks: int,
    settle: int = 0,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> list[float]:
    """p50 (µs) of each call of each group, flattened in order.

    Calls of a group are sampled round-robin as in :func:`rotating_p50`.
    Groups take turns block by block (A B A B ...), ``blocks`` blocks each
    of ``samples // blocks`` samples of every call, so a group that must not
    run call by call beside another (it leaves threads busy behind it)
    still meets the same stretches of machine time as the others. Each block
    starts with ``settle`` untimed rounds of its group's calls, so that what
    the group before it left busy (onnxruntime's spinning pool threads: tens
    of ms of a core after its last call) is idle again before the timed ones.
    ``clock``: nanoseconds (a test's fake clock).
    """
    if samples % blocks:
        raise ValueError(f"{samples} samples do not split into {blocks} blocks")
    calls = [call for group in groups for call in group]
    times: list[list[int]] = [[] for _ in calls]
    per_block = samples // blocks
    gc.collect()
    for block in range(blocks):
        offset = 0
        for group in groups:
            n = len(group)
            for _ in range(settle):
                for call in group:
                    await call()
            for i in range(per_block):
                # the first call rotates over the whole run, not per block
                for j in range(n):
                    k = (block * per_block + i + j) % n
                    start = clock()
                    await group[k]()
                    times[offset + k].append(clock() - start)
            offset += n
    return [p50(t) for t in times]
