"""onnxruntime sessions: one graph on a given number of intra-op threads.

Its own module because both the forward pass (:mod:`.runtime`) and the int8
builder's loss measurement (:mod:`.quantize`) open sessions, and the builder
is itself called from :mod:`.runtime`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def onnx_session(path: Path, threads: int, spinning: bool = True) -> Any:
    """An onnxruntime session of the graph at ``path`` on ``threads`` intra-op
    threads; with ``spinning`` (onnxruntime's default) idle pool threads
    spin-wait for the next operator instead of sleeping.

    Either way the pool stops spinning when a run returns
    (``session.force_spinning_stop``): left to itself a pool thread spins on
    a core for about 40 ms after each run, where a worker has nothing to run
    until its next request and the host process, which must wake to read the
    reply and write the next request, needs that core (docs/cpu-lane.md)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.force_spinning_stop", "1")
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
