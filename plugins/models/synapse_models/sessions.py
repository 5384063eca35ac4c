"""onnxruntime sessions: one graph on a given number of intra-op threads.

Its own module because both the forward pass (:mod:`.model`) and the int8
builder's loss measurement (:mod:`.quantize`) open sessions, and the builder
is itself called from :mod:`.model`. The execution providers are a
parameter: the CPU lane passes :data:`CPU`, a GPU lane its own.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: an execution provider as onnxruntime takes it: its name, or its name and
#: its options (``("CUDAExecutionProvider", {"device_id": 0})``)
Provider = str | tuple[str, Mapping[str, Any]]
log = logging.getLogger(__name__)
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


@functools.cache
def cpu_signature() -> str:
    """Eight hex digits naming this CPU's instruction sets: pre-packed weights
    are laid out for the kernels onnxruntime picks on them, so a file of them
    is only ever read back on a CPU of the same signature."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            flags = next((line for line in info if line.startswith(("flags", "Features"))), "")
    except OSError:  # pragma: no cover - not Linux
        pass
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:8]


def packed_path(graph: Path) -> Path:
    """Where the pre-packed copy of ``graph`` is cached (:func:`packed_graph`)."""
    return graph.with_name(f"{graph.stem}-packed-{cpu_signature()}.onnx")


def packed_graph(graph: Path) -> Path:
    """``graph`` as onnxruntime runs it on this CPU, with the matrix
    products' weights pre-packed and written out beside it (an external
    data file), built once and cached.

    A session of this file maps the packed weights from the file instead of
    packing its own copy on the heap: every session of a worker (one per
    thread count it runs with, :class:`synapse_models.model.OnnxSessions`)
    shares the same pages, so a worker holds its weights once whatever its
    thread counts (docs/cpu-lane.md has the measurements). The data file is
    renamed into place before the ``.onnx`` that names it. Where it cannot be
    written (a full disk), ``graph`` itself, with a warning."""
    target = packed_path(graph)
    if target.is_file():
        return target
    try:
        _pack(graph, target)
    except OSError as exc:  # a full disk: the unpacked graph still serves
        log.warning(
            "synapse-models: cannot write the pre-packed graph %s (%s); each thread count's "
            "session packs its own copy of the weights",
            target,
            exc.strerror or exc,
        )
        return graph
    return target


def _pack(graph: Path, target: Path) -> None:
    import onnxruntime as ort

    data = f"{target.name}.data"
    aside = Path(tempfile.mkdtemp(dir=graph.parent, prefix=".packing-"))
    try:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.optimized_model_filepath = str(aside / target.name)
        for key, value in (
            ("session.optimized_model_external_initializers_file_name", data),
            ("session.optimized_model_external_initializers_min_size_in_bytes", "1024"),
            ("session.save_external_prepacked_constant_initializers", "1"),
        ):
            options.add_session_config_entry(key, value)
        # onnxruntime warns that the file may hold this machine's layouts: it is
        # named after this CPU (cpu_signature) for that reason.
        options.log_severity_level = 3
        ort.InferenceSession(str(graph), options, providers=list(CPU))
        if (aside / data).is_file():
            os.replace(aside / data, target.with_name(data))
        os.replace(aside / target.name, target)
    finally:
        shutil.rmtree(aside, ignore_errors=True)
