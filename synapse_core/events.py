"""The observer API: the supervisor's events, as a plugin implementing
``synapse_observe`` receives them (see :mod:`synapse_core.hookspecs`).

:class:`Event` is the base of every kind (its ``lane``, ``worker_id`` and
``generation``); :data:`AnyEvent` is the union of the kinds, for a typed
decoder: :class:`WorkerStarted`, :class:`ShapeAdmitted`,
:class:`ShapeRefunded`, :class:`WorkerFaulted`, :class:`WorkerExited`, and,
with ``certify_observation = true``, :class:`WorkerInventory` and
:class:`AdmissionCount`. Shapes are :class:`Shape`.

Implement the hook with :data:`synapse_core.hookimpl`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

_EXPORTS = {
    "AdmissionCount": "observation",
    "AnyEvent": "observation",
    "Event": "observation",
    "ShapeAdmitted": "observation",
    "ShapeRefunded": "observation",
    "WorkerExited": "observation",
    "WorkerFaulted": "observation",
    "WorkerInventory": "observation",
    "WorkerStarted": "observation",
    "Shape": "wire",
}

__all__ = [
    "AdmissionCount",
    "AnyEvent",
    "Event",
    "Shape",
    "ShapeAdmitted",
    "ShapeRefunded",
    "WorkerExited",
    "WorkerFaulted",
    "WorkerInventory",
    "WorkerStarted",
]

__getattr__ = lazy_getattr(__name__, "synapse_core", _EXPORTS, globals())

if TYPE_CHECKING:
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
    from .wire import Shape
