"""Switching each speed shortcut of a host off and on (see :mod:`benchmarks.shortcuts`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from synapse_core.host import Host
from synapse_core.residency.worker import Worker
from synapse_core.serving import CallRunner

SHORTCUTS = ("head_start",)
#: an A/A pair: both sides are the same path, so its ratio shows what noise
#: and the sampling order alone make of a whole-call figure
CONTROL = "control"

#: the shortcuts ``python -m benchmarks --without`` switches off
WITHOUT: set[str] = set()


class Switch:
    """Turns one shortcut of one host on and off between calls.

    Both directions are plain attribute assignments made inside the timed
    call, so neither side pays for switching more than the other. The
    control's two sides are both the head start's *on*.
    """

    def __init__(self, name: str, host: Host, worker: Worker) -> None:
        runner = host._runner
        start, try_begin = runner.start, runner.try_begin
        late = no_head_start(runner)

        def on() -> None:
            runner.start, runner.try_begin = start, try_begin  # type: ignore[method-assign]

        def off() -> None:
            runner.start, runner.try_begin = late, no_request  # type: ignore[method-assign,assignment]

        self.name = name
        self.on: Callable[[], None] = on
        self.off: Callable[[], None]
        if name == CONTROL:
            self.off = on
        elif name == "head_start":
            self.off = off
        else:
            raise ValueError(f"unknown shortcut {name!r}; one of {', '.join(SHORTCUTS)}")


def no_head_start(runner: CallRunner) -> Callable[..., None]:
    """``CallRunner.start`` without the head start: only the overload check
    stays in the caller's task; the detached task takes everything."""

    def start(call: Any, head: Any) -> None:
        runner.check_room()

    return start


def no_request(*args: Any) -> None:
    """``CallRunner.try_begin`` that never writes (with :func:`no_head_start`)."""
    return None


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
    runner = host._runner
    saved: list[Callable[[], None]] = []
    for name in names:
        if name == "head_start":
            saved.append(_patch(runner, "start", no_head_start(runner)))
            saved.append(_patch(runner, "try_begin", no_request))
        else:
            raise ValueError(f"unknown shortcut {name!r}; one of {', '.join(SHORTCUTS)}")
    try:
        yield
    finally:
        for undo in reversed(saved):
            undo()
