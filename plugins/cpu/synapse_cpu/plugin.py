"""Entry point of the ``cpu`` plugin (entry-point group ``synapse``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from synapse_core.plugin import ModelSpec, Shape, Transport, hookimpl

if TYPE_CHECKING:
    import click

    from synapse_core.policy import LaneView

from .costs import charges_weights, shape_mib
from .transport import CpuTransport, model_facts


@hookimpl
def synapse_register_commands(cli: click.Group) -> None:
    """``synapse pull MODEL``: a hub model's weights into the local cache."""
    from .pull import pull_command

    cli.add_command(pull_command)


@hookimpl
def synapse_register_transports(register: Callable[[Transport], None]) -> None:
    register(CpuTransport())


@hookimpl
def synapse_admission_cost(
    model: ModelSpec, shape: Shape, lane: LaneView, worker_id: str
) -> int | None:
    """MiB: the shape's working set, plus the worker's weights on the admission
    that finds none of its reservations carrying them; both once per copy of
    the model the worker may hold (``costs.copies``: its onnxruntime sessions)."""
    if model.transport != CpuTransport.name:
        return None
    facts = model_facts(model)
    sizes = (facts.batch_tokens, facts.hidden, facts.copies)
    working = shape_mib(shape, *sizes)
    if charges_weights(worker_id, lane, facts.weights_mib, *sizes):
        return working + facts.weights_mib
    return working
