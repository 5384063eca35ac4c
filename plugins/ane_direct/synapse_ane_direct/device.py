"""The device interface a direct-ANE worker drives, and the simulated device.

The worker logic knows the Neural Engine only through :class:`Device`, so the
same logic runs on hardware (:mod:`.hardware`) and on :class:`SimulatedDevice`,
which tests use everywhere the hardware cannot run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from synapse_core.plugin import MULTIPLICATIVE, Declined, Shape, Task

#: the simulated device's model: each token id hashed into one signed feature
SIMULATED_MODEL = MULTIPLICATIVE


class DeviceError(Declined):
    """The device could not do what was asked; ``code`` travels in a failure frame."""

    code = "device-error"


class DeviceUnavailable(DeviceError):
    """The device cannot run here at all; the message says why."""

    code = "device-unavailable"


class Device(Protocol):
    """What a worker needs from a Neural Engine."""

    #: ``"hardware"`` or ``"simulated"``
    kind: str
    #: part of the vector-space identity the worker reports
    identity: str

    def compile(self, shape: Shape) -> bool:
        """Make ``shape`` runnable; return True if it had to be compiled (cold)."""
        ...

    def run(
        self,
        shape: Shape,
        task: Task,
        sequences: Sequence[Sequence[int]],
        query: Sequence[int] | None,
    ) -> list[list[float]]:
        """One batch: a ``dims``-wide row per sequence (embed) or a 1-wide score (rerank)."""
        ...

    def evict(self, shape: Shape) -> None:
        """Forget ``shape``'s compiled program."""
        ...

    def close(self) -> None:
        """Release the device; the worker is about to exit."""
        ...


class SimulatedDevice:
    """A deterministic stand-in for the Neural Engine.

    ``compile_delay_s`` is slept (with ``sleep``) on every cold compile; the
    in-process variant passes a no-op ``sleep`` and holds replies instead.
    """

    kind = "simulated"

    def __init__(
        self,
        dims: int,
        *,
        compile_delay_s: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.dims = dims
        self.identity = f"sim-d{dims}"
        self.compile_delay_s = compile_delay_s
        self._sleep = sleep
        self.compiled: set[Shape] = set()
        self.compiles = 0
        self.closed = False

    def compile(self, shape: Shape) -> bool:
        if shape in self.compiled:
            return False
        if self.compile_delay_s:
            self._sleep(self.compile_delay_s)
        self.compiled.add(shape)
        self.compiles += 1
        return True

    def run(
        self,
        shape: Shape,
        task: Task,
        sequences: Sequence[Sequence[int]],
        query: Sequence[int] | None,
    ) -> list[list[float]]:
        if shape not in self.compiled:
            raise DeviceError(f"shape {shape} is not compiled")
        if task == "rerank":
            scores = SIMULATED_MODEL.rerank(query or [], sequences, self.dims)
            return [[score] for score in scores]
        return [SIMULATED_MODEL.embed(seq, self.dims) for seq in sequences]

    def evict(self, shape: Shape) -> None:
        self.compiled.discard(shape)

    def close(self) -> None:
        self.closed = True
        self.compiled.clear()


class RefusingDevice:
    """A device that could not be opened: every operation says why."""

    kind = "unavailable"
    identity = "unavailable"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def compile(self, shape: Shape) -> bool:
        raise DeviceUnavailable(self.reason)

    def run(
        self,
        shape: Shape,
        task: Task,
        sequences: Sequence[Sequence[int]],
        query: Sequence[int] | None,
    ) -> list[list[float]]:
        raise DeviceUnavailable(self.reason)

    def evict(self, shape: Shape) -> None:
        pass

    def close(self) -> None:
        pass
