"""Errors raised by Synapse. Every public error subclasses :class:`SynapseError`.

Each carries a stable ``code`` so programs can branch on it and the CLI can map
it to an exit status without parsing messages.

The last section holds the exceptions that never reach a host API caller as
they are: what plugins raise (:class:`FieldInvalid`, :class:`Declined`) and
what the wire and channel raise inside the host, which turns them into the
errors above. This module imports nothing, so worker processes load it too.
"""

from __future__ import annotations


class SynapseError(Exception):
    """Base class of every error Synapse raises on purpose."""

    code: str = "synapse-error"


class ConfigError(SynapseError):
    """A catalog or host configuration is invalid.

    ``problems`` lists one ``path: what is wrong`` line per bad field, e.g.
    ``models[2].ceiling: expected int``.
    """

    code = "bad-config"

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = list(problems)
        listing = "; ".join(self.problems)
        super().__init__(f"invalid configuration in {source}: {listing}")


class Refused(SynapseError):
    """A call was refused before any worker was spawned or any inference ran.

    ``code`` is one of ``unknown-model``, ``wrong-task``,
    ``transport-unavailable``, ``empty-input``, ``missing-query`` (a rerank
    without a query), ``invalid-text`` (an input that is not a string, or
    holds a lone surrogate), ``invalid-token`` (a token id that is not an
    integer, is negative, is not a 32-bit integer or is past the model's
    vocabulary), ``empty-sequence``, ``over-ceiling``, ``unknown-prompt``
    (a prompt name the model does not have), ``unsupported-output`` (an
    output, say sparse vectors, the model does not compute) and
    ``unsupported-dimensions`` (a vector size the model gives no vectors of:
    see :mod:`synapse_core.matryoshka`);
    ``index`` names the offending input (``None`` when the refusal is about
    the whole call or the rerank query).
    """

    CODES = (
        "unknown-model",
        "wrong-task",
        "transport-unavailable",
        "empty-input",
        "missing-query",
        "invalid-text",
        "invalid-token",
        "empty-sequence",
        "over-ceiling",
        "unknown-prompt",
        "unsupported-output",
        "unsupported-dimensions",
    )

    def __init__(self, code: str, message: str, *, model: str, index: int | None = None) -> None:
        if code not in self.CODES:
            raise ValueError(f"unknown refusal code {code!r}")
        self.code = code  # the instance's code narrows the class default
        self.model = model
        self.index = index
        self.message = message
        super().__init__(message)


class DeadlineExceeded(SynapseError):
    """The call's absolute deadline passed before its result was ready."""

    code = "deadline-exceeded"


class OutcomeUnknown(SynapseError):
    """A request frame reached a worker that then failed: it may have run.

    Synapse never replays such a request on a replacement worker; retry only if
    running it twice is harmless for you.
    """

    code = "outcome-unknown"


class WorkerFault(SynapseError):
    """A worker failed before the call's inference was sent; retrying is safe."""

    code = "worker-fault"


class WorkerRejected(WorkerFault):
    """The worker answered a request with a failure instead of its rows.

    Not a fault: the worker keeps serving and is not restarted, and nothing
    of the request was produced. Its input may be the cause (token ids past
    the model's vocabulary, say), so a coalesced call that ends in it is not
    passed on to its callers: each of their calls starts alone instead.
    """


class Retired(SynapseError):
    """The model is being retired (or was retired) and takes no new work."""

    code = "retired"

    @classmethod
    def host_closing(cls, model: str) -> Retired:
        """What a call on ``model`` gets when the host closes before it answered."""
        return cls(f"the host closed before {model!r} answered")


class LaneLocked(SynapseError):
    """A device lane is held by another host process; nothing was bypassed."""

    code = "lane-locked"


class RuntimeDirError(SynapseError):
    """The runtime directory for lane locks is missing, foreign or shared."""

    code = "runtime-dir"


class Overloaded(SynapseError):
    """Too many calls are already waiting; try again later (like HTTP 429)."""

    code = "overloaded"


class HostClosed(SynapseError):
    """The host was closed: it takes no calls, loads or retirements any more."""

    code = "host-closed"


class CapacityExhausted(SynapseError):
    """The lane could not fit the shape's reservation within the deadline."""

    code = "capacity-exhausted"


class ProtocolError(SynapseError):
    """A frame could not be decoded, was too large, or was not expected."""

    code = "protocol-error"


class PluginError(SynapseError):
    """A plugin failed to load, registered an invalid hook implementation,
    or broke its contract (a tokenizer whose count and encode disagree)."""

    code = "plugin-error"


class InternalError(SynapseError):
    """Synapse itself failed serving a call (a bug): the host keeps serving."""

    code = "internal-error"


class ExitUnconfirmed(WorkerFault):
    """A launched process could not be confirmed gone: nothing may replace it.

    Callers see the worker as unavailable (a :class:`WorkerFault`)."""


class CapacityError(AssertionError):
    """An invariant of a lane's reservation table was about to break (a bug)."""


class IdentityChanged(SynapseError):
    """Two batches of one command came from different vector spaces."""

    code = "identity-changed"


# -- raised by plugins, or by the wire and channel under the host --------------


class FieldInvalid(ValueError):
    """Raised by validators: names the field, and its message is shown as is."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Declined(Exception):
    """Raise from a :class:`~synapse_core.plugin.ModelWorker` method to decline one request.

    The host gets a ``failure`` frame with ``code`` and the message (the
    caller sees a ``WorkerFault``) and the worker keeps serving. For a worker
    that is broken, exit instead (``raise SystemExit(1)``): the host restarts it.
    """

    code = "declined"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class WireError(Exception):
    """A frame could not be decoded, is too large, or is not expected here.

    Workers raise it too, so it does not derive from the host's error classes;
    the host re-raises it as :class:`ProtocolError`.
    """


class ChannelClosed(Exception):
    """The peer closed the channel or the underlying stream failed."""


class ExchangeTimeout(Exception):
    """No reply arrived within the exchange bound."""


class Fault(Exception):
    """A fault of one worker generation, seen by one exchange (inside the
    host only: the serving path turns it into ``OutcomeUnknown`` or
    ``WorkerFault``)."""

    def __init__(self, generation: int, reason: str, written: bool) -> None:
        super().__init__(reason)
        self.generation = generation
        self.reason = reason
        self.written = written


class CallerGone(Exception):
    """The caller gave up before its call's next request was sent (inside
    the host only: the call then starts nothing new)."""
