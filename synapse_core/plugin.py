"""The plugin API for transport authors: everything a transport, its worker
and its in-process variant may import from Synapse.

Import from here, never from ``synapse_core``'s other modules: those are
internal and change without notice. Other audiences have modules of their
own: the host API is :mod:`synapse_core` itself, residency policies use
:mod:`synapse_core.policy`, observers :mod:`synapse_core.events`, plugins
that add commands :mod:`synapse_core.cli`, and tests
:mod:`synapse_core.testing` (with :mod:`synapse_core.testing.conformance`,
the conformance suite). Names load on first use, so a worker process
importing ``ModelWorker`` does not pay for the host's modules.

- Transports: :class:`Transport`, :class:`Availability`, :class:`LaneInfo`,
  :class:`ModelTraits` (and its :data:`Scorer`), :class:`Conversion`,
  :class:`ModelSource` (a model given by ``--model``),
  :class:`LaneSession`, :class:`LaunchRequest`, :class:`Launched`,
  :class:`WorkerProcess` (:class:`ProcessGroup` for a group leader),
  :func:`spawn_worker`, :func:`launch_spec`, :func:`confirm_exit`,
  :data:`hookimpl`, :class:`ModelSpec`, :data:`Task`, tokenizers
  (:class:`BasicTokenizer` is the default one; :class:`DescribingTokenizer`
  and :class:`TokenPiece` for one that can say what each token is,
  :class:`SizedTokenizer` for one that knows its vocabulary's size,
  :class:`CountingTokenizer` for one that counts cheaper than it encodes,
  :class:`BatchTokenizer` for one that encodes many texts at once), and the
  errors a transport raises (:class:`LaneLocked`, :class:`SynapseError`).
- A device lane one host at a time may use: :func:`acquire_lane_lock` (the
  host's :class:`LaneLock`, a :class:`LaneSession`), :func:`holds_lane` (a
  worker's check of the descriptor it inherited), :func:`lane_lock_path`,
  :func:`default_runtime_dir`, :func:`private_dir`, :func:`system_temp_dir`
  and :class:`RuntimeDirError`.
- Options: :func:`parse_options`, :class:`FieldInvalid`,
  :class:`ConfigError`, :class:`WorkerOptions`, :class:`Faults`, the ready
  validators (:func:`positive`, ...), and :func:`structuring_problems` for a
  plugin that structures its own settings with cattrs.
- Workers: :class:`ModelWorker`, :class:`Declined`, :func:`worker_main`,
  :class:`Shape`, :class:`LaunchSpec`; for hand-written test workers the
  frame-level :class:`WorkerLogic`, its actions and :class:`WireError`.
- The in-process variant of a transport: :class:`InProcessWorkers`,
  :class:`InProcessProcess`, :class:`LaunchRecord`.
- A stand-in model: :class:`HashWorker` (a complete worker over
  :class:`HashOptions`) and :class:`HashScheme` (token ids hashed into a
  unit vector; :data:`CRC32_POSITIONAL`, :data:`SPLITMIX64`,
  :data:`MULTIPLICATIVE`), for mock transports and simulated devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

_EXPORTS = {
    # transports
    "Availability": "transport",
    "Conversion": "transport",
    "LaneInfo": "transport",
    "LaneSession": "transport",
    "ModelSource": "transport",
    "ModelTraits": "transport",
    "Scorer": "transport",
    "LaunchRequest": "transport",
    "ProcessGroup": "transport",
    "Launched": "transport",
    "Transport": "transport",
    "WorkerProcess": "transport",
    "confirm_exit": "process",
    "launch_spec": "process",
    "spawn_worker": "process",
    "hookimpl": "hookspecs",
    "ModelSpec": "config",
    "Task": "wire",
    "Kind": "kinds",
    "BasicTokenizer": "tokenizer",
    "BatchTokenizer": "tokenizer",
    "CountingTokenizer": "tokenizer",
    "DescribingTokenizer": "tokenizer",
    "SizedTokenizer": "tokenizer",
    "TokenPiece": "tokenizer",
    "Tokenizer": "tokenizer",
    "LaneLocked": "errors",
    "RuntimeDirError": "errors",
    "LaneLock": "lanelock",
    "acquire_lane_lock": "lanelock",
    "holds_lane": "lanelock",
    "lane_lock_path": "lanelock",
    "default_runtime_dir": "lanelock",
    "private_dir": "lanelock",
    "system_temp_dir": "lanelock",
    "SynapseError": "errors",
    # options
    "ConfigError": "errors",
    "FieldInvalid": "errors",
    "Faults": "worker",
    "WorkerOptions": "worker",
    "parse_options": "worker",
    "appendable_file": "worker",
    "bucket_sizes": "worker",
    "count": "worker",
    "validator": "worker",
    "positive": "worker",
    "seconds": "worker",
    "structuring_problems": "config",
    # workers
    "Declined": "errors",
    "ModelWorker": "worker",
    "Rows": "worker",
    "Scores": "worker",
    "worker_main": "worker",
    "Frame": "wire",
    "LaunchSpec": "wire",
    "Shape": "wire",
    "WireError": "errors",
    "Action": "worker",
    "Crash": "worker",
    "Hang": "worker",
    "RawReply": "worker",
    "Reply": "worker",
    "Stop": "worker",
    "WorkerLogic": "worker",
    # the in-process variant
    "InProcessProcess": "inprocess",
    "InProcessWorkers": "inprocess",
    "LaunchRecord": "inprocess",
    # a stand-in model
    "CRC32_POSITIONAL": "worker.hashing",
    "MULTIPLICATIVE": "worker.hashing",
    "SPLITMIX64": "worker.hashing",
    "HashOptions": "worker.hashing",
    "HashScheme": "worker.hashing",
    "HashWorker": "worker.hashing",
}

__all__ = [
    "CRC32_POSITIONAL",
    "MULTIPLICATIVE",
    "SPLITMIX64",
    "Action",
    "Availability",
    "BasicTokenizer",
    "BatchTokenizer",
    "ConfigError",
    "Conversion",
    "CountingTokenizer",
    "Crash",
    "Declined",
    "DescribingTokenizer",
    "Faults",
    "FieldInvalid",
    "Frame",
    "Hang",
    "HashOptions",
    "HashScheme",
    "HashWorker",
    "InProcessProcess",
    "InProcessWorkers",
    "Kind",
    "LaneInfo",
    "LaneLock",
    "LaneLocked",
    "LaneSession",
    "LaunchRecord",
    "LaunchRequest",
    "LaunchSpec",
    "Launched",
    "ModelSource",
    "ModelSpec",
    "ModelTraits",
    "ModelWorker",
    "ProcessGroup",
    "RawReply",
    "Reply",
    "Rows",
    "RuntimeDirError",
    "Scorer",
    "Scores",
    "Shape",
    "SizedTokenizer",
    "Stop",
    "SynapseError",
    "Task",
    "TokenPiece",
    "Tokenizer",
    "Transport",
    "WireError",
    "WorkerLogic",
    "WorkerOptions",
    "WorkerProcess",
    "acquire_lane_lock",
    "appendable_file",
    "bucket_sizes",
    "confirm_exit",
    "count",
    "default_runtime_dir",
    "holds_lane",
    "hookimpl",
    "lane_lock_path",
    "launch_spec",
    "parse_options",
    "positive",
    "private_dir",
    "seconds",
    "spawn_worker",
    "structuring_problems",
    "system_temp_dir",
    "validator",
    "worker_main",
]

__getattr__ = lazy_getattr(__name__, "synapse_core", _EXPORTS, globals())

if TYPE_CHECKING:
    from .config import ModelSpec, structuring_problems
    from .errors import (
        ConfigError,
        Declined,
        FieldInvalid,
        LaneLocked,
        RuntimeDirError,
        SynapseError,
        WireError,
    )
    from .hookspecs import hookimpl
    from .inprocess import InProcessProcess, InProcessWorkers, LaunchRecord
    from .kinds import Kind
    from .lanelock import (
        LaneLock,
        acquire_lane_lock,
        default_runtime_dir,
        holds_lane,
        lane_lock_path,
        private_dir,
        system_temp_dir,
    )
    from .process import confirm_exit, launch_spec, spawn_worker
    from .tokenizer import (
        BasicTokenizer,
        BatchTokenizer,
        CountingTokenizer,
        DescribingTokenizer,
        SizedTokenizer,
        Tokenizer,
        TokenPiece,
    )
    from .transport import (
        Availability,
        Conversion,
        LaneInfo,
        LaneSession,
        Launched,
        LaunchRequest,
        ModelSource,
        ModelTraits,
        ProcessGroup,
        Scorer,
        Transport,
        WorkerProcess,
    )
    from .wire import Frame, LaunchSpec, Shape, Task
    from .worker import (
        Action,
        Crash,
        Faults,
        Hang,
        ModelWorker,
        RawReply,
        Reply,
        Rows,
        Scores,
        Stop,
        WorkerLogic,
        WorkerOptions,
        appendable_file,
        bucket_sizes,
        count,
        parse_options,
        positive,
        seconds,
        validator,
        worker_main,
    )
    from .worker.hashing import (
        CRC32_POSITIONAL,
        MULTIPLICATIVE,
        SPLITMIX64,
        HashOptions,
        HashScheme,
        HashWorker,
    )
