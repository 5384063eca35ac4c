"""What a call sends and keeps: its plan cut into requests, and the rows of
each reply put back in input order.

A plan's inputs are grouped by the smallest bucket that fits each and cut
into batch-sized steps; each step is one ``Infer`` request on the worker.
"""

from __future__ import annotations

from typing import cast

import attrs

from .call import Call
from .channel import Exchange
from .plan import Group, Plan, group_by_bucket, over_ceiling
from .plugins import PluginHost
from .residency.worker import Selection, Worker
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
    """``plan``'s requests on ``worker``, smallest bucket first: batch-sized
    chunks of its bucket groups. The worker remembers the bucket selector it
    was given until its hello or the plugins change."""
    hello = worker.hello
    assert hello is not None
    selection = worker.selection
    if (
        selection is None
        or selection.hello is not hello
        or selection.plugins_version != plugins.version
    ):
        selection = worker.remember(
            Selection(
                hello,
                plugins.version,
                plugins.bucket_selector(hello.buckets, worker.spec),
                worker.ceiling,
            )
        )
    longest = plan.longest
    if longest.length > selection.ceiling:
        raise over_ceiling(plan.model, longest, selection.ceiling, pair=plan.query is not None)
    return group_by_bucket(plan.items, selection.select, hello.max_batch)


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
