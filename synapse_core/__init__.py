"""Synapse: a serving host for embedding and rerank models on shared devices.

Public API::

    import synapse_core as synapse

    config = synapse.HostConfig.from_toml("catalog.toml")
    async with synapse.open_host(config) as host:
        r = await host.embed("mini-a", ["first text"], deadline=synapse.Deadline.after(5.0))

Names are imported lazily so worker processes, which need only
:mod:`synapse_core.wire`, start quickly.

This module is the host API (for applications and tools, and for plugins
that drive a host). Each kind of plugin has a published module of its own:
:mod:`synapse_core.plugin` (transports and their workers),
:mod:`synapse_core.policy` (residency policies), :mod:`synapse_core.events`
(observers), :mod:`synapse_core.cli` (plugins that add commands),
:mod:`synapse_core.frontend` (front ends: names in messages, bounds on
tokenising, ASGI apps found by name) and :mod:`synapse_core.testing`
(tests). Every other module of the package is internal: it may change in any
release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

__version__ = "0.1.0"

_EXPORTS = {
    "HostConfig": "config",
    "default_config": "catalog",
    "default_catalog_text": "catalog",
    "DEFAULT_CATALOG_SOURCE": "catalog",
    "Entry": "catalog",
    "ModelSpec": "config",
    "LaneConfig": "config",
    "RestartBudget": "config",
    "Deadline": "deadline",
    "FakeClock": "deadline",
    "open_host": "opening",
    "CLOSE_SLACK_S": "host",
    "Host": "host",
    "AroundCall": "host",
    "EmbedResult": "call",
    "RerankResult": "call",
    "OutputsResult": "outputs",
    "ClassifyResult": "classify",
    "Prediction": "classify",
    "SparseVector": "outputs",
    "Kind": "kinds",
    "HostSnapshot": "snapshot",
    "hookimpl": "hookspecs",
    "PluginHost": "plugins",
    "Transport": "transport",
    "Hello": "wire",
    "Task": "wire",
    "TokenPiece": "tokenizer",
    "SynapseError": "errors",
    "ConfigError": "errors",
    "Refused": "errors",
    "DeadlineExceeded": "errors",
    "OutcomeUnknown": "errors",
    "WorkerFault": "errors",
    "WorkerRejected": "errors",
    "Retired": "errors",
    "LaneLocked": "errors",
    "RuntimeDirError": "errors",
    "Overloaded": "errors",
    "HostClosed": "errors",
    "CapacityExhausted": "errors",
    "ProtocolError": "errors",
    "PluginError": "errors",
    "InternalError": "errors",
}

__all__ = [
    "CLOSE_SLACK_S",
    "DEFAULT_CATALOG_SOURCE",
    "AroundCall",
    "CapacityExhausted",
    "ClassifyResult",
    "ConfigError",
    "Deadline",
    "DeadlineExceeded",
    "EmbedResult",
    "Entry",
    "FakeClock",
    "Hello",
    "Host",
    "HostClosed",
    "HostConfig",
    "HostSnapshot",
    "InternalError",
    "Kind",
    "LaneConfig",
    "LaneLocked",
    "ModelSpec",
    "OutcomeUnknown",
    "OutputsResult",
    "Overloaded",
    "PluginError",
    "PluginHost",
    "Prediction",
    "ProtocolError",
    "Refused",
    "RerankResult",
    "RestartBudget",
    "Retired",
    "RuntimeDirError",
    "SparseVector",
    "SynapseError",
    "Task",
    "TokenPiece",
    "Transport",
    "WorkerFault",
    "WorkerRejected",
    "__version__",
    "default_catalog_text",
    "default_config",
    "hookimpl",
    "open_host",
]


__getattr__ = lazy_getattr(__name__, __name__, _EXPORTS, globals())


if TYPE_CHECKING:
    from .call import EmbedResult, RerankResult
    from .catalog import DEFAULT_CATALOG_SOURCE, Entry, default_catalog_text, default_config
    from .classify import ClassifyResult, Prediction
    from .config import HostConfig, LaneConfig, ModelSpec, RestartBudget
    from .deadline import Deadline, FakeClock
    from .errors import (
        CapacityExhausted,
        ConfigError,
        DeadlineExceeded,
        HostClosed,
        InternalError,
        LaneLocked,
        OutcomeUnknown,
        Overloaded,
        PluginError,
        ProtocolError,
        Refused,
        Retired,
        RuntimeDirError,
        SynapseError,
        WorkerFault,
        WorkerRejected,
    )
    from .hookspecs import hookimpl
    from .host import CLOSE_SLACK_S, AroundCall, Host
    from .kinds import Kind
    from .opening import open_host
    from .outputs import OutputsResult, SparseVector
    from .plugins import PluginHost
    from .snapshot import HostSnapshot
    from .tokenizer import TokenPiece
    from .transport import Transport
    from .wire import Hello, Task
