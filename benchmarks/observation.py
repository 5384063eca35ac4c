"""What observation costs the serving path, off and on.

Both hosts register a trivial ``synapse_observe`` sink (as a deployment with
an observer plugin installed would). The baseline is the *same* host with its
supervisors' observer forced to ``None`` (observation short-circuited
entirely); samples alternate between the two states call by call.

- off: ``certify_observation = false``, the sink registered.
- on: ``certify_observation = true``, the sink registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from synapse_core.hookspecs import hookimpl
from synapse_core.host import Host
from synapse_core.observation import Event
from synapse_core.opening import open_host
from synapse_core.residency.supervisor import Supervisor

from . import rig
from .harness import Figure, Mode, Series, Target, rotating_p50


class CountingObserver:
    """A trivial sink: counts events."""

    __name__ = "bench-observer"

    def __init__(self) -> None:
        self.events = 0

    @hookimpl
    def synapse_observe(self, event: Event) -> None:
        self.events += 1


class ObservationSwitch:
    """Flips a host's supervisors between their own observer and none at all."""

    def __init__(self, host: Host) -> None:
        self.supervisors: list[Supervisor] = list(host.supervisors.values())
        self.saved: list[tuple[Callable[[Event], None] | None, bool]] = [
            (s.context.observe, s.context.certify) for s in self.supervisors
        ]
        self.off: list[tuple[Callable[[Event], None] | None, bool]] = [
            (None, False) for _ in self.supervisors
        ]

    def normal(self) -> None:
        self._apply(self.saved)

    def short_circuit(self) -> None:
        self._apply(self.off)

    def _apply(self, states: list[tuple[Callable[[Event], None] | None, bool]]) -> None:
        # Both switches run this same code inside the timed call, so neither
        # side of the ratio pays for switching more than the other.
        for sup, (observe, certify) in zip(self.supervisors, states, strict=True):
            sup.context.observe, sup.context.certify = observe, certify


def measure(mode: Mode) -> list[Figure]:
    off: Series = anyio.run(_measure, mode, False)
    on: Series = anyio.run(_measure, mode, True)
    return [
        Figure(
            "observation_off_ratio",
            "ratio",
            "embed p50, certify_observation = false / observation short-circuited",
            off.ratio("normal_p50_us", "short_p50_us"),
            Target("<=", 1.02),
            off.medians("normal_p50_us", "short_p50_us", "events_while_serving"),
        ),
        Figure(
            "observation_on_ratio",
            "ratio",
            "embed p50, certify_observation = true with a sink / observation short-circuited",
            on.ratio("normal_p50_us", "short_p50_us"),
            None,
            on.medians("normal_p50_us", "short_p50_us", "events_while_serving"),
        ),
    ]


async def _measure(mode: Mode, certify: bool) -> Series:
    observer = CountingObserver()
    settings: dict[str, Any] = {"certify_observation": certify}
    series = Series()
    async with open_host(rig.config(**settings), plugins=rig.plugins(extra=[observer])) as host:
        await rig.warm(host)
        switch = ObservationSwitch(host)
        assert all(observe is not None for observe, _ in switch.saved), "sink not registered"
        texts = [rig.SHORT_TEXT]

        async def normal() -> None:
            switch.normal()
            await host.embed(rig.MODEL, texts)

        async def short_circuited() -> None:
            switch.short_circuit()
            await host.embed(rig.MODEL, texts)

        for _ in range(mode.repetitions):
            before = observer.events
            normal_us, short_us = await rotating_p50(
                [normal, short_circuited], mode.latency_samples
            )
            series.add(
                normal_p50_us=normal_us,
                short_p50_us=short_us,
                events_while_serving=float(observer.events - before),
            )
        switch.normal()
    return series
