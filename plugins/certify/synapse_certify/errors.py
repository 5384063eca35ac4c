"""Errors raised by synapse-certify; each carries a stable ``code``."""

from __future__ import annotations

from synapse_core import SynapseError


class CertifyError(SynapseError):
    """Base class of synapse-certify's errors."""

    code = "certify-error"


class StreamError(CertifyError):
    """A recorded stream cannot be read: ``line`` is 1-based (0: the file itself)."""

    code = "bad-stream"

    def __init__(self, source: str, line: int, problem: str) -> None:
        self.source = source
        self.line = line
        self.problem = problem
        where = f"{source} line {line}" if line else source
        super().__init__(f"{where}: {problem}")


class RecordingError(CertifyError):
    """Events could not be written, so the recorded stream is incomplete."""

    code = "recording-failed"


class IdentityMismatch(CertifyError):
    """Something bound to one certified identity was used with another."""

    code = "identity-mismatch"

    def __init__(
        self, what: str, bound: str, current: str, kind: str = "certified identity"
    ) -> None:
        self.what = what
        self.bound = bound
        self.current = current
        super().__init__(
            f"{what} is bound to {kind} {bound}, not {current}; approvals and vector-space "
            "identities are never reused across identities: certify this one, or restore "
            "the core/worker pair they were issued for"
        )
