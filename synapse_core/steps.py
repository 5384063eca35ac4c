"""What a call sends and keeps: its plan cut into requests, and the rows of
each reply put back in input order.

A plan's inputs are grouped by the smallest bucket that fits each and cut
into steps of at most the worker's batch size and the model's request budget
(``max_batch_tokens`` positions); each step is one ``Infer`` request on the
worker, and between two of them the worker may serve other calls.
"""

from __future__ import annotations

from typing import cast

import attrs

from .call import Call
from .channel import Exchange
from .config import ModelSpec
from .errors import PluginError
from .plan import Group, Plan, group_by_bucket, over_ceiling
from .plugins import PluginHost
from .residency.worker import Worker
from .transport import Transport
from .wire import Infer, Output, Shape, rows_of


@attrs.frozen
class HeadStart:
    """A call's steps, worked out before the call's record was made, and its
    first request if that was written then (``begun``; see
    :meth:`~synapse_core.serving.CallRunner.head_start`)."""

    steps: list[Group]
    #: the shape of the first step
    shape: Shape
    begun: tuple[Infer, Exchange] | None


def plan_steps(plan: Plan, worker: Worker, plugins: PluginHost) -> list[Group]:
    """``plan``'s requests on ``worker``, smallest bucket first: chunks of
    its bucket groups, bounded by the batch size and the request budget."""
    hello = worker.hello
    assert hello is not None
    longest, ceiling = plan.longest, worker.ceiling
    if longest.length > ceiling:
        raise over_ceiling(plan.model, longest, ceiling, pair=plan.query is not None)
    select = plugins.bucket_selector(hello.buckets, worker.spec)
    budget = request_budget(worker.spec, worker.transport)
    return group_by_bucket(plan.items, select, hello.max_batch, budget)


def request_budget(spec: ModelSpec, transport: Transport) -> int | None:
    """The most positions one request of ``spec``'s calls carries: the
    catalog's ``max_batch_tokens``, else its transport's default."""
    if spec.max_batch_tokens is not None:
        return spec.max_batch_tokens
    budget = transport.max_batch_tokens(spec)
    if budget is not None and (type(budget) is not int or budget <= 0):
        raise PluginError(
            f"transport {transport.name!r} gave max_batch_tokens = {budget!r} for model "
            f"{spec.name!r}; a transport's default must be a whole number above 0, or None"
        )
    return budget


def step_shape(worker: Worker, step: Group) -> Shape:
    """The shape a step's request is leased and run at."""
    assert worker.hello is not None
    return Shape(step.bucket, worker.hello.max_batch)


def infer_request(plan: Plan, request_id: int, shape: Shape, step: Group) -> Infer:
    """The request of ``step`` (its inputs encoded now, unless they are already)."""
    return Infer(
        request_id,
        shape,
        plan.task,  # type: ignore[arg-type]
        plan.encode(step.items),
        plan.query,
    )


def store_rows(call: Call, step: Group, output: Output) -> None:
    """Put the rows of ``step``'s reply at their inputs' places in ``call.rows``."""
    rows = rows_of(output)
    if len(rows) == len(call.rows):
        # One request held every input, in input order.
        call.rows = cast(list[list[float] | None], rows)
        return
    for item, row in zip(step.items, rows, strict=True):
        call.rows[item.index] = row
