"""What a call sends and keeps: its plan cut into requests, and the rows of
each reply put back in input order.

A plan's inputs are grouped by the smallest bucket that fits each and cut
into steps of at most the worker's batch size and the model's request budget
(``max_batch_tokens`` positions); each step is one ``Infer`` request on the
worker, and between two of them the worker may serve other calls. The budget
is for sharing: a call that has the worker to itself sends its later steps
joined up to the batch size (:func:`join_next`), and keeps to the budget from
the moment a second call enters the worker until the worker is idle again.
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
from .residency.worker import Selection, Worker
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
    its bucket groups, bounded by the batch size and the request budget. The
    worker remembers its bucket selector and budget until its hello or the
    plugins change."""
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
                request_budget(worker.spec, worker.transport),
            )
        )
    longest = plan.longest
    if longest.length > selection.ceiling:
        raise over_ceiling(plan.model, longest, selection.ceiling, pair=plan.query is not None)
    return group_by_bucket(plan.items, selection.select, hello.max_batch, selection.budget)


def join_steps(steps: list[Group], start: int, batch: int) -> None:
    """Join ``steps[start]`` with the steps after it of its bucket, in place,
    up to ``batch`` items: one request where the budget cut several. A step
    taken in part keeps the rest of its items, so every input is still sent
    once and in the same order."""
    first = steps[start]
    room = batch - len(first.items)
    stop = start + 1
    while room > 0 and stop < len(steps) and steps[stop].bucket == first.bucket:
        room -= len(steps[stop].items)
        stop += 1
    if stop == start + 1:
        return
    items = [item for step in steps[start:stop] for item in step.items]
    joined = [Group(first.bucket, items[:batch])]
    if len(items) > batch:
        joined.append(Group(first.bucket, items[batch:]))
    steps[start:stop] = joined


def join_next(steps: list[Group], index: int, worker: Worker) -> Group:
    """The step to send as ``steps[index]``: joined with the steps after it of
    its bucket (in place, :func:`join_steps`) while its call has ``worker``
    to itself (:attr:`Worker.shared`: no second call has entered it since it
    was last idle). A call's first step keeps to the budget: it may have been
    sent already (the head start), and another call may come just as it starts."""
    assert worker.hello is not None
    if index and not worker.shared:
        join_steps(steps, index, worker.hello.max_batch)
    return steps[index]


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
