"""onnxruntime sessions: one graph on a given number of intra-op threads.

Its own module because both the forward pass (:mod:`.model`) and the int8
builder's loss measurement (:mod:`.quantize`) open sessions, and the builder
is itself called from :mod:`.model`. The execution providers are a
parameter: the CPU lane passes :data:`CPU`, a GPU lane its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: an execution provider as onnxruntime takes it: its name, or its name and
#: its options (``("CUDAExecutionProvider", {"device_id": 0})``)
Provider = str | tuple[str, Mapping[str, Any]]
#: the execution providers a lane runs a graph on; the CPU lane's
CPU: tuple[Provider, ...] = ("CPUExecutionProvider",)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else all)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1  # pragma: no cover - Linux has affinity masks


def provider_name(provider: Provider) -> str:
    """The execution provider's name, with or without its options."""
    return provider if isinstance(provider, str) else provider[0]


def onnx_session(
    path: Path, threads: int, spinning: bool = True, providers: Sequence[Provider] = CPU
) -> Any:
    """An onnxruntime session of the graph at ``path`` on ``threads`` intra-op
    threads; with ``spinning`` (onnxruntime's default) idle pool threads
    spin-wait for the next operator instead of sleeping.

    Either way the pool stops spinning when a run returns
    (``session.force_spinning_stop``): left to itself a pool thread spins on
    a core for about 40 ms after each run, where a worker has nothing to run
    until its next request and the host process, which must wake to read the
    reply and write the next request, needs that core (docs/cpu-lane.md).

    ``providers``: names, or (name, options) pairs, in onnxruntime's order
    of preference (a GPU lane: its provider with ``device_id``, then the
    CPU's for the few operators it leaves)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.force_spinning_stop", "1")
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    listed = [p if isinstance(p, str) else (p[0], dict(p[1])) for p in providers]
    return ort.InferenceSession(str(path), options, providers=listed)
