"""Certification for Synapse: record observation streams, gate placement, bind identities.

- :class:`Recorder` — a plugin object that records supervisor events (register
  it only when recording; see :mod:`synapse_certify.recorder`);
- :func:`read_stream` / :func:`check` — read a JSON-lines stream and replay
  it through the placement gate, giving a :class:`GateReport`
  (:func:`replay` takes ``(line, event)`` pairs, as
  ``synapse_certify.stream.read_numbered`` gives them);
- :class:`CertifiedIdentity`, :class:`Approval`, :class:`VectorSpace` — what
  approvals and vector spaces belong to.
"""

from .errors import CertifyError, IdentityMismatch, RecordingError, StreamError
from .gate import GateReport, Problem, check, replay
from .identity import Approval, CertifiedIdentity, VectorSpace, installed_identity, os_build
from .recorder import Recorder
from .stream import read as read_stream

__version__ = "0.1.0"
__all__ = [
    "Approval",
    "CertifiedIdentity",
    "CertifyError",
    "GateReport",
    "IdentityMismatch",
    "Problem",
    "Recorder",
    "RecordingError",
    "StreamError",
    "VectorSpace",
    "__version__",
    "check",
    "installed_identity",
    "os_build",
    "read_stream",
    "replay",
]
