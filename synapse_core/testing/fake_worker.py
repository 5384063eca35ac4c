"""The fake transport's worker: deterministic rows from token ids, nothing more.

The core's own tests serve through it, with no plugin installed. It is the
kit's :class:`~synapse_core.worker.hashing.HashWorker` with the
order-sensitive :data:`~synapse_core.worker.hashing.CRC32_POSITIONAL` hash;
the kit supplies the protocol, the fault knobs (``faults``) and the frame
trace (``trace``); see :class:`~synapse_core.worker.hashing.HashOptions` for
the rest of its catalog options.
"""

from __future__ import annotations

from ..worker.hashing import CRC32_POSITIONAL, HashOptions, HashWorker

#: a fake model's ``[models.options]``
FakeOptions = HashOptions


def fake_vector(tokens: list[int], dims: int) -> list[float]:
    """The fake worker's row for ``tokens`` (never depends on batch mates)."""
    return CRC32_POSITIONAL.embed(tokens, dims)


class FakeWorker(HashWorker):
    scheme = CRC32_POSITIONAL
    identity_format = "fake:{package}:d{dims}"
    implementation = "synapse-core-fake"
    version = "1"
