"""Fault knobs: a wrapper any worker's tests can switch on from catalog options.

A transport opts in by deriving its options class from :class:`WorkerOptions`
(which adds the ``faults`` and ``trace`` options, validated with paths such
as ``options.faults.crash_on_infer``); the kit then wraps the worker in
:class:`FaultInjector` when a knob is set for the running generation::

    [models.options.faults]
    crash_on_infer = 2      # the 2nd inference of each generation crashes
    only_generation = 1     # ... of generation 1 only
"""

from __future__ import annotations

import attrs

from ..wire import PREFIX, Admit, Admitted, Frame, Hello, Infer
from .loop import Action, Crash, Hang, RawReply, Reply, WorkerLogic
from .options import appendable_file, count, seconds

# 0xc1 is never used in MessagePack: a frame of it cannot decode.
MALFORMED = PREFIX.pack(4) + b"\xc1\xc1\xc1\xc1"


@attrs.frozen
class Faults:
    """Fault knobs. Counts are per worker generation, starting at 1."""

    #: seconds added before every reply
    reply_delay_s: float = attrs.field(default=0.0, validator=seconds)
    #: seconds added before the reply to a cold admission
    cold_admit_delay_s: float = attrs.field(default=0.0, validator=seconds)
    #: exit without a reply on this inference
    crash_on_infer: int | None = attrs.field(default=None, validator=count)
    #: answer this inference with a frame that cannot decode
    malformed_on_infer: int | None = attrs.field(default=None, validator=count)
    #: never answer this inference
    hang_on_infer: int | None = attrs.field(default=None, validator=count)
    #: exit without a reply on this admission
    crash_on_admit: int | None = attrs.field(default=None, validator=count)
    #: keep running on SIGTERM (the host must SIGKILL)
    ignore_sigterm: bool = False
    #: apply the knobs to this generation only (default: every generation)
    only_generation: int | None = attrs.field(default=None, validator=count)

    def active(self, generation: int) -> bool:
        """Whether any knob applies to ``generation``."""
        return self != _NONE and (self.only_generation in (None, generation))


_NONE = Faults()


@attrs.frozen(kw_only=True)
class WorkerOptions:
    """Options every :class:`~.model.ModelWorker` understands; derive yours from it.

    ``faults`` switches on :class:`Faults` (for tests); ``trace`` appends one
    JSON line per frame to a file (see :mod:`.trace`).
    """

    faults: Faults = Faults()
    trace: str | None = attrs.field(default=None, validator=appendable_file)


class FaultInjector:
    """Wraps a :class:`~.loop.WorkerLogic`, answering chosen frames with faults."""

    def __init__(self, inner: WorkerLogic, faults: Faults) -> None:
        self.inner = inner
        self.faults = faults
        self.ignore_sigterm = faults.ignore_sigterm or inner.ignore_sigterm
        self.admits = 0
        self.infers = 0

    def hello(self) -> Hello:
        return self.inner.hello()

    def handle(self, frame: Frame) -> Action:
        f = self.faults
        extra = 0.0
        if isinstance(frame, Admit):
            self.admits += 1
            if f.crash_on_admit == self.admits:
                return Crash()
        elif isinstance(frame, Infer):
            self.infers += 1
            if f.crash_on_infer == self.infers:
                return Crash()
            if f.hang_on_infer == self.infers:
                return Hang()
            if f.malformed_on_infer == self.infers:
                return RawReply(MALFORMED, f.reply_delay_s)
        action = self.inner.handle(frame)
        if isinstance(action, Reply):
            if isinstance(action.frame, Admitted) and action.frame.cold:
                extra = f.cold_admit_delay_s
            return Reply(action.frame, action.delay_s + f.reply_delay_s + extra)
        return action

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
