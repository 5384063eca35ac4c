"""Everything a transport or tool plugin may import from Synapse.

Import from here, never from ``synapse_core``'s other modules: those are
internal and change without notice, while these names are the plugin API.
Names load on first use, so a worker process importing ``ModelWorker`` does
not pay for the host's modules.

- Transports: :class:`Transport`, :class:`Availability`, :class:`LaneInfo`,
  :class:`LaneSession`, :class:`LaunchRequest`, :class:`Launched`,
  :class:`WorkerProcess`, :func:`spawn_worker`, :func:`launch_spec`,
  :func:`confirm_exit`, :data:`hookimpl`, :class:`ModelSpec`, tokenizers.
- Options: :func:`parse_options`, :class:`FieldInvalid`,
  :class:`ConfigError`, :class:`WorkerOptions`, :class:`Faults`.
- Workers: :class:`ModelWorker`, :class:`Declined`, :func:`worker_main`,
  :class:`Shape`, :class:`LaunchSpec`; for hand-written test workers the
  frame-level :class:`WorkerLogic` and its actions.
- Observers and tools: the supervisor's events (:class:`Event` and its
  kinds, :data:`AnyEvent`), :class:`Hello`, :func:`default_config`.
- Tests: the in-process helpers (:class:`InProcessWorkers`,
  :class:`InProcessProcess`, :class:`LaunchRecord`), :func:`transport_plugin`,
  :func:`catalog_toml`, :func:`eventually`, :func:`make_cli` (the
  ``synapse`` command over chosen plugins).
- Plugin commands: :data:`catalog_option` and :func:`load_config`
  (``--catalog``, ``SYNAPSE_CATALOG``), :func:`installed_plugins`,
  :func:`unwrap` (the error out of a task group's exception group).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

_EXPORTS = {
    # transports
    "Availability": "transport",
    "LaneInfo": "transport",
    "LaneSession": "transport",
    "LaunchRequest": "transport",
    "Launched": "transport",
    "Transport": "transport",
    "WorkerProcess": "transport",
    "confirm_exit": "process",
    "launch_spec": "process",
    "spawn_worker": "process",
    "hookimpl": "hookspecs",
    "ModelSpec": "config",
    "BasicTokenizer": "tokenizer",
    "CountingTokenizer": "tokenizer",
    "Tokenizer": "tokenizer",
    "LaneLocked": "errors",
    "SynapseError": "errors",
    # options
    "ConfigError": "errors",
    "FieldInvalid": "config",
    "Faults": "worker",
    "WorkerOptions": "worker",
    "parse_options": "worker",
    "appendable_file": "worker",
    "bucket_sizes": "worker",
    "count": "worker",
    "validator": "worker",
    "positive": "worker",
    "seconds": "worker",
    # workers
    "Declined": "worker",
    "ModelWorker": "worker",
    "Rows": "worker",
    "Scores": "worker",
    "worker_main": "worker",
    "Frame": "wire",
    "LaunchSpec": "wire",
    "Shape": "wire",
    "Task": "wire",
    "Action": "worker",
    "Crash": "worker",
    "Hang": "worker",
    "RawReply": "worker",
    "Reply": "worker",
    "Stop": "worker",
    "WorkerLogic": "worker",
    # observers and tools
    "AdmissionCount": "observation",
    "AnyEvent": "observation",
    "Event": "observation",
    "ShapeAdmitted": "observation",
    "ShapeRefunded": "observation",
    "WorkerExited": "observation",
    "WorkerFaulted": "observation",
    "WorkerInventory": "observation",
    "WorkerStarted": "observation",
    "Hello": "wire",
    "default_config": "catalog",
    # tests
    "InProcessProcess": "inprocess",
    "InProcessWorkers": "inprocess",
    "LaunchRecord": "inprocess",
    "catalog_toml": "testing",
    "make_cli": "cli",
    # plugin commands
    "catalog_option": "cli",
    "installed_plugins": "cli",
    "load_config": "cli",
    "unwrap": "cli",
    "eventually": "testing",
    "transport_plugin": "testing",
}

__all__ = [
    "Action",
    "AdmissionCount",
    "AnyEvent",
    "Availability",
    "BasicTokenizer",
    "ConfigError",
    "CountingTokenizer",
    "Crash",
    "Declined",
    "Event",
    "Faults",
    "FieldInvalid",
    "Frame",
    "Hang",
    "Hello",
    "InProcessProcess",
    "InProcessWorkers",
    "LaneInfo",
    "LaneLocked",
    "LaneSession",
    "LaunchRecord",
    "LaunchRequest",
    "LaunchSpec",
    "Launched",
    "ModelSpec",
    "ModelWorker",
    "RawReply",
    "Reply",
    "Rows",
    "Scores",
    "Shape",
    "ShapeAdmitted",
    "ShapeRefunded",
    "Stop",
    "SynapseError",
    "Task",
    "Tokenizer",
    "Transport",
    "WorkerExited",
    "WorkerFaulted",
    "WorkerInventory",
    "WorkerLogic",
    "WorkerOptions",
    "WorkerProcess",
    "WorkerStarted",
    "appendable_file",
    "bucket_sizes",
    "catalog_option",
    "catalog_toml",
    "confirm_exit",
    "count",
    "default_config",
    "eventually",
    "hookimpl",
    "installed_plugins",
    "launch_spec",
    "load_config",
    "make_cli",
    "parse_options",
    "positive",
    "seconds",
    "spawn_worker",
    "transport_plugin",
    "unwrap",
    "validator",
    "worker_main",
]

__getattr__ = lazy_getattr(__name__, "synapse_core", _EXPORTS, globals())

if TYPE_CHECKING:
    from .catalog import default_config
    from .cli import catalog_option, installed_plugins, load_config, make_cli, unwrap
    from .config import FieldInvalid, ModelSpec
    from .errors import ConfigError, LaneLocked, SynapseError
    from .hookspecs import hookimpl
    from .inprocess import InProcessProcess, InProcessWorkers, LaunchRecord
    from .observation import (
        AdmissionCount,
        AnyEvent,
        Event,
        ShapeAdmitted,
        ShapeRefunded,
        WorkerExited,
        WorkerFaulted,
        WorkerInventory,
        WorkerStarted,
    )
    from .process import confirm_exit, launch_spec, spawn_worker
    from .testing import catalog_toml, eventually, transport_plugin
    from .tokenizer import BasicTokenizer, CountingTokenizer, Tokenizer
    from .transport import (
        Availability,
        LaneInfo,
        LaneSession,
        Launched,
        LaunchRequest,
        Transport,
        WorkerProcess,
    )
    from .wire import Frame, Hello, LaunchSpec, Shape, Task
    from .worker import (
        Action,
        Crash,
        Declined,
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
