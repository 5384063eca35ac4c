"""The worker kit: what runs inside a worker process.

Authors subclass :class:`ModelWorker` (see its docstring) and import these
names through :mod:`synapse_core.plugin`. Imported by worker processes, so it
stays free of host imports.
"""

from .entry import worker_main
from .faults import MALFORMED, FaultInjector, Faults, WorkerOptions
from .loop import Action, Crash, Hang, RawReply, Reply, Stop, WorkerLogic, host_codec, serve_streams
from .model import ModelLogic, ModelWorker, Rows, Scores, build_logic
from .options import (
    appendable_file,
    bucket_sizes,
    count,
    parse_options,
    positive,
    seconds,
    validator,
)
from .trace import Traced, TraceSink, file_sink

__all__ = [
    "MALFORMED",
    "Action",
    "Crash",
    "FaultInjector",
    "Faults",
    "Hang",
    "ModelLogic",
    "ModelWorker",
    "RawReply",
    "Reply",
    "Rows",
    "Scores",
    "Stop",
    "TraceSink",
    "Traced",
    "WorkerLogic",
    "WorkerOptions",
    "appendable_file",
    "bucket_sizes",
    "build_logic",
    "count",
    "file_sink",
    "host_codec",
    "parse_options",
    "positive",
    "seconds",
    "serve_streams",
    "validator",
    "worker_main",
]
