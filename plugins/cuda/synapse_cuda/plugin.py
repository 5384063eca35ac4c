"""Entry point of the ``cuda`` plugin (entry-point group ``synapse``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from synapse_core.plugin import ModelSpec, Shape, Transport, hookimpl

if TYPE_CHECKING:
    from synapse_core.policy import AdmissionRequest, Decision, LaneView

from . import costs
from .transport import NAME, CudaTransport

#: the transport this plugin registers; its admissions are priced here
TRANSPORT = CudaTransport()
#: the shape whose admission carried each worker's weights, by (lane, worker)
_carriers: dict[tuple[str, str], Shape] = {}


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(TRANSPORT)


@hookimpl
def synapse_admission_cost(
    model: ModelSpec, shape: Shape, lane: LaneView, worker_id: str
) -> int | None:
    """MiB of the GPU: what the shape was measured to take (else its estimate),
    plus the worker's weights (measured, else estimated) on the admission that
    finds none of its reservations carrying them."""
    if model.transport != NAME:
        return None
    facts = TRANSPORT.facts(model)
    measured = costs.read_table(facts.table)
    working = measured.shapes.get(costs.shape_key(shape)) or costs.estimate_shape(
        shape, facts.batch_tokens, facts.hidden, facts.heads, facts.precision
    )
    key = (lane.lane_id, worker_id)
    carrier = _carriers.get(key)
    if carrier is not None and any(
        r.worker_id == worker_id and r.shape == carrier for r in lane.reservations
    ):
        return working
    _carriers[key] = shape
    weights = measured.weights or costs.estimate_weights(facts.weights_bytes, facts.precision)
    return working + weights


@hookimpl
def synapse_lane_full(request: AdmissionRequest, lane: LaneView) -> Decision | None:
    """A full GPU waits for a worker's exit: evicting a shape would free
    nothing on the device (onnxruntime's arena keeps what a shape took for
    its worker's life), so the refund would be a lie."""
    if request.model.transport != NAME:
        return None
    from synapse_core.policy import Wait

    return Wait()
