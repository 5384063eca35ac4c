"""The residency-policy API: what a plugin implementing the policy hooks
(``synapse_admission_cost``, ``synapse_lane_full``, ``synapse_select_bucket``;
see :mod:`synapse_core.hookspecs`) sees and may answer.

- What a hook sees: :class:`LaneView` (a read-only picture of a lane, with
  every :class:`Reservation`), :class:`AdmissionRequest` (who asks for how
  many units of which :class:`Shape`).
- What ``synapse_lane_full`` may answer, a :data:`Decision`: :class:`Wait`,
  :class:`Evict` (an unleased reservation) or :class:`Refuse`.

Implement the hooks with :data:`synapse_core.hookimpl`; a model is a
:class:`synapse_core.ModelSpec`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_getattr

_EXPORTS = {
    "AdmissionRequest": "residency.policy",
    "Decision": "residency.policy",
    "Evict": "residency.policy",
    "LaneView": "residency.policy",
    "Refuse": "residency.policy",
    "Reservation": "residency.policy",
    "Wait": "residency.policy",
    "Shape": "wire",
}

__all__ = [
    "AdmissionRequest",
    "Decision",
    "Evict",
    "LaneView",
    "Refuse",
    "Reservation",
    "Shape",
    "Wait",
]

__getattr__ = lazy_getattr(__name__, "synapse_core", _EXPORTS, globals())

if TYPE_CHECKING:
    from .residency.policy import (
        AdmissionRequest,
        Decision,
        Evict,
        LaneView,
        Refuse,
        Reservation,
        Wait,
    )
    from .wire import Shape
