"""The plugin API: everything a transport, observer or tool plugin may import
from Synapse.

Import from here (and, for tools that drive a host, from the host API of
``synapse_core`` itself), never from ``synapse_core``'s other modules: those
are internal and change without notice, while these names are the plugin API.
Names load on first use, so a worker process importing ``ModelWorker`` does
not pay for the host's modules.

- Transports: :class:`Transport`, :class:`Availability`, :class:`LaneInfo`,
  :class:`LaneSession`, :class:`LaunchRequest`, :class:`Launched`,
  :class:`WorkerProcess` (:class:`ProcessGroup` for a group leader),
  :func:`spawn_worker`, :func:`launch_spec`, :func:`confirm_exit`,
  :data:`hookimpl`, :class:`ModelSpec`, :data:`Task`, tokenizers
  (:class:`BasicTokenizer` is the default one; :class:`DescribingTokenizer`
  and :class:`TokenPiece` for one that can say what each token is).
- Options: :func:`parse_options`, :class:`FieldInvalid`,
  :class:`ConfigError`, :class:`WorkerOptions`, :class:`Faults`, the ready
  validators (:func:`positive`, ...), and :func:`structuring_problems` for a
  plugin that structures its own settings with cattrs.
- Workers: :class:`ModelWorker`, :class:`Declined`, :func:`worker_main`,
  :class:`Shape`, :class:`LaunchSpec`; for hand-written test workers the
  frame-level :class:`WorkerLogic`, its actions and :class:`WireError`.
- Residency policy (the ``synapse_admission_cost`` and ``synapse_lane_full``
  hooks): :class:`LaneView`, :class:`Reservation`, :class:`AdmissionRequest`
  and the :data:`Decision` answers :class:`Wait`, :class:`Evict`,
  :class:`Refuse`.
- Observers and tools: the supervisor's events (:class:`Event` and its
  kinds, :data:`AnyEvent`), :class:`Hello`, :class:`Entry` (a model as
  ``Host.catalog`` resolved it), :func:`default_config`, :func:`default_catalog_text`
  and :data:`DEFAULT_CATALOG_SOURCE`, :data:`CLOSE_SLACK_S` (the slack in
  ``Host.aclose``'s bound: the exchange bound, four exit graces, and this),
  :func:`shown` and :data:`SHOWN_CHARS` (a client's name quoted for an
  error or a log, cut when long), :func:`max_chars`, :data:`CHARS_PER_TOKEN`,
  :func:`bounded`, :func:`characters`, :data:`OFFLOAD_CHARS`,
  :func:`give_back` and :func:`map_large_blocks` (the bounds on tokenising
  and on the memory it leaves, for a front end that tokenises texts itself).
- Tests: the in-process helpers (:class:`InProcessWorkers`,
  :class:`InProcessProcess`, :class:`LaunchRecord`), :func:`transport_plugin`,
  :func:`model_entry`, :func:`catalog_toml` and :func:`host_config` (test
  catalogs), :func:`eventually`, :func:`pid_exists`,
  :func:`make_cli` (the ``synapse`` command over chosen plugins), and the
  conformance suite (:class:`Conformance`, :class:`Subject`).
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
    "BasicTokenizer": "tokenizer",
    "CountingTokenizer": "tokenizer",
    "DescribingTokenizer": "tokenizer",
    "TokenPiece": "tokenizer",
    "Tokenizer": "tokenizer",
    "LaneLocked": "errors",
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
    # residency policy
    "AdmissionRequest": "residency.policy",
    "Decision": "residency.policy",
    "Evict": "residency.policy",
    "LaneView": "residency.policy",
    "Refuse": "residency.policy",
    "Reservation": "residency.policy",
    "Wait": "residency.policy",
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
    "Entry": "catalog",
    "DEFAULT_CATALOG_SOURCE": "catalog",
    "default_catalog_text": "catalog",
    "default_config": "catalog",
    "CLOSE_SLACK_S": "host",
    "SHOWN_CHARS": "shown",
    "CHARS_PER_TOKEN": "bounds",
    "OFFLOAD_CHARS": "bounds",
    "bounded": "bounds",
    "characters": "bounds",
    "give_back": "bounds",
    "map_large_blocks": "bounds",
    "max_chars": "bounds",
    "shown": "shown",
    # tests
    "InProcessProcess": "inprocess",
    "InProcessWorkers": "inprocess",
    "LaunchRecord": "inprocess",
    "catalog_toml": "testing",
    "host_config": "testing",
    "model_entry": "testing",
    "eventually": "testing",
    "pid_exists": "testing",
    "transport_plugin": "testing",
    "Conformance": "testing.conformance",
    "Subject": "testing.conformance",
    "make_cli": "cli",
    # plugin commands
    "catalog_option": "cli",
    "installed_plugins": "cli",
    "load_config": "cli",
    "unwrap": "cli",
}

__all__ = [
    "CHARS_PER_TOKEN",
    "CLOSE_SLACK_S",
    "DEFAULT_CATALOG_SOURCE",
    "OFFLOAD_CHARS",
    "SHOWN_CHARS",
    "Action",
    "AdmissionCount",
    "AdmissionRequest",
    "AnyEvent",
    "Availability",
    "BasicTokenizer",
    "ConfigError",
    "Conformance",
    "CountingTokenizer",
    "Crash",
    "Decision",
    "Declined",
    "DescribingTokenizer",
    "Entry",
    "Event",
    "Evict",
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
    "LaneView",
    "LaunchRecord",
    "LaunchRequest",
    "LaunchSpec",
    "Launched",
    "ModelSpec",
    "ModelWorker",
    "ProcessGroup",
    "RawReply",
    "Refuse",
    "Reply",
    "Reservation",
    "Rows",
    "Scores",
    "Shape",
    "ShapeAdmitted",
    "ShapeRefunded",
    "Stop",
    "Subject",
    "SynapseError",
    "Task",
    "TokenPiece",
    "Tokenizer",
    "Transport",
    "Wait",
    "WireError",
    "WorkerExited",
    "WorkerFaulted",
    "WorkerInventory",
    "WorkerLogic",
    "WorkerOptions",
    "WorkerProcess",
    "WorkerStarted",
    "appendable_file",
    "bounded",
    "bucket_sizes",
    "catalog_option",
    "catalog_toml",
    "characters",
    "confirm_exit",
    "count",
    "default_catalog_text",
    "default_config",
    "eventually",
    "give_back",
    "hookimpl",
    "host_config",
    "installed_plugins",
    "launch_spec",
    "load_config",
    "make_cli",
    "map_large_blocks",
    "max_chars",
    "model_entry",
    "parse_options",
    "pid_exists",
    "positive",
    "seconds",
    "shown",
    "spawn_worker",
    "structuring_problems",
    "transport_plugin",
    "unwrap",
    "validator",
    "worker_main",
]

__getattr__ = lazy_getattr(__name__, "synapse_core", _EXPORTS, globals())

if TYPE_CHECKING:
    from .bounds import (
        CHARS_PER_TOKEN,
        OFFLOAD_CHARS,
        bounded,
        characters,
        give_back,
        map_large_blocks,
        max_chars,
    )
    from .catalog import DEFAULT_CATALOG_SOURCE, Entry, default_catalog_text, default_config
    from .cli import catalog_option, installed_plugins, load_config, make_cli, unwrap
    from .config import ModelSpec, structuring_problems
    from .errors import ConfigError, Declined, FieldInvalid, LaneLocked, SynapseError, WireError
    from .hookspecs import hookimpl
    from .host import CLOSE_SLACK_S
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
    from .residency.policy import (
        AdmissionRequest,
        Decision,
        Evict,
        LaneView,
        Refuse,
        Reservation,
        Wait,
    )
    from .shown import SHOWN_CHARS, shown
    from .testing import (
        catalog_toml,
        eventually,
        host_config,
        model_entry,
        pid_exists,
        transport_plugin,
    )
    from .testing.conformance import Conformance, Subject
    from .tokenizer import (
        BasicTokenizer,
        CountingTokenizer,
        DescribingTokenizer,
        Tokenizer,
        TokenPiece,
    )
    from .transport import (
        Availability,
        LaneInfo,
        LaneSession,
        Launched,
        LaunchRequest,
        ProcessGroup,
        Transport,
        WorkerProcess,
    )
    from .wire import Frame, Hello, LaunchSpec, Shape, Task
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
