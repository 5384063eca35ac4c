"""Synapse's own hook implementations: the defaults every other plugin overrides.

Registered first, so pluggy asks them last among firstresult hooks.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import ModelSpec
from .hookspecs import hookimpl
from .residency.policy import AdmissionRequest, Decision, Evict, LaneView, Wait
from .wire import Shape


@hookimpl
def synapse_admission_cost(model: ModelSpec, shape: Shape, lane: LaneView) -> int:
    return shape.bucket * shape.batch


@hookimpl
def synapse_lane_full(request: AdmissionRequest, lane: LaneView) -> Decision:
    # Unleased resident shapes are a cache: evict the least recently used one
    # rather than make callers wait for a refund that only retirement brings.
    victims = [r for r in lane.reservations if r.evictable]
    if victims:
        victim = min(victims, key=lambda r: r.last_used)
        return Evict(victim.worker_id, victim.shape)
    return Wait()


@hookimpl
def synapse_select_bucket(length: int, buckets: Sequence[int], model: ModelSpec) -> int | None:
    for bucket in buckets:
        if bucket >= length:
            return bucket
    return None
