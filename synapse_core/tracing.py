"""Hooks for tracing calls: the points of the serving path a tracer is told about.

The host asks its :attr:`~synapse_core.host.Host.tracer` for a
:class:`CallTrace` when a call arrives, and the serving path tells that
trace each point the call passes, as it passes it:

- :meth:`CallTrace.planned`: the inputs are tokenised and checked;
- :meth:`CallTrace.admitted`: the call holds an execution permit, a ready
  worker and a lease of the shape its next request runs on (the wait for
  admission, which a call that starts at once does not make, ends here);
- :meth:`CallTrace.exchanged`: a worker answered one request (or failed to).

A point says only that it was reached: a trace that wants durations reads
its own clock at each point, from the one before. The default tracer hands
out :data:`NO_TRACE`, whose methods do nothing, so a host that nobody traces
pays one empty method call per point and imports nothing. A front end
installs a tracer of its own (``synapse serve --otlp-endpoint``: OpenTelemetry).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import Task
    from .errors import Fault
    from .plan import Plan
    from .wire import Frame, Infer, Shape


class CallTrace:
    """What the serving path tells about one call; this base records nothing
    (:data:`NO_TRACE`). A tracer's own subclass overrides the points it records."""

    __slots__ = ()

    def planned(self, plan: Plan) -> None:
        """The call's inputs are tokenised and checked: ``plan`` is made."""

    def admitted(self, shape: Shape) -> None:
        """The call may send a request of ``shape``: it holds the permit, a
        ready worker and the lease (a shape a later request changes to is
        admitted again)."""

    def exchanged(
        self, request: Infer, reply: Frame | Fault, worker_id: str, generation: int
    ) -> None:
        """Worker ``worker_id`` (``generation``) answered ``request`` with
        ``reply``: an :class:`~synapse_core.wire.Output` (whose ``compute_ns``
        is the worker's own measure of its compute), a refusal, or the
        :class:`~synapse_core.errors.Fault` that ended the exchange."""


#: the trace of a call nobody traces
NO_TRACE = CallTrace()


class Tracer:
    """Makes each call's :class:`CallTrace`; this base traces nothing
    (:data:`NO_TRACER`, a host's default)."""

    __slots__ = ()

    def call(self, model: str, task: Task) -> CallTrace:
        """The trace of a call of ``model`` for ``task`` that starts now, in
        its caller's task (a tracer may read the caller's context here)."""
        return NO_TRACE


#: the tracer of a host nobody traces
NO_TRACER = Tracer()


class Fanout(CallTrace):
    """The trace of a call that serves several callers' calls (coalesced):
    each point is told to every caller's trace."""

    __slots__ = ("traces",)

    def __init__(self, traces: Sequence[CallTrace]) -> None:
        self.traces = tuple(traces)

    def planned(self, plan: Plan) -> None:
        for trace in self.traces:
            trace.planned(plan)

    def admitted(self, shape: Shape) -> None:
        for trace in self.traces:
            trace.admitted(shape)

    def exchanged(
        self, request: Infer, reply: Frame | Fault, worker_id: str, generation: int
    ) -> None:
        for trace in self.traces:
            trace.exchanged(request, reply, worker_id, generation)


def joined(traces: Sequence[CallTrace]) -> CallTrace:
    """One trace telling each of ``traces`` that is not :data:`NO_TRACE`."""
    kept = [trace for trace in traces if trace is not NO_TRACE]
    if not kept:
        return NO_TRACE
    return kept[0] if len(kept) == 1 else Fanout(kept)
