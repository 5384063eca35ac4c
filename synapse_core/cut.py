"""Cutting a plan into requests: what a call sends, one ``Infer`` per step.

A plan's inputs are grouped by the smallest bucket that fits each and cut
into steps of at most the worker's batch size and the model's request budget
(``max_batch_tokens`` positions); each step is one ``Infer`` request on the
worker, and between two of them the worker may serve other calls. The budget
is for sharing with small calls: a call sends its later steps joined up to
the batch size and :data:`JOINED_BUDGETS` budgets (:func:`join_next`), and
keeps to the budget from the moment a small call (:func:`is_small`) and
another call are in the worker together until the worker is idle again.
Bulk calls beside each other alone take turns in joined requests: none of
them waits on a short answer, and small requests would cost them the
exchange per request.

A plan is cut once (:func:`steps_of` keeps its steps in the plan, for the
bucket choice they were cut by), and the ceiling is checked once:
the plan checked every input against the catalog's ceiling, so cutting it
checks again only when the worker's own ceiling is lower (its largest bucket
is smaller than the catalog declared).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

import attrs

from .config import ModelSpec
from .errors import PluginError, Refused
from .plan import Group, Item, Plan, over_ceiling
from .plugins import PluginHost
from .residency.worker import Worker
from .transport import Transport
from .wire import Hello, Infer, Shape, widths_of

#: a joined request holds at most this many budgets of positions, so the
#: small call that comes while it runs (and makes the rest keep to the
#: budget) waits for at most that: joined up to the batch size alone, a
#: request could be 32 texts of bucket 256, 8,192 positions, where the
#: budget is about 0.1 s of one thread's work (0.9 s on two cores with
#: onnxruntime, 4 s on numpy's one thread). Four budgets keep a joined
#: request in the slice sizes a CPU worker runs fastest (docs/performance.md)
JOINED_BUDGETS = 4


@attrs.frozen
class Selection:
    """How one call picks buckets on a worker."""

    hello: Hello
    select: Callable[[int], int]
    #: longest sequence served: the catalog ceiling, capped by the largest bucket
    ceiling: int
    #: most positions (bucket x sequences) per request, or ``None``: ``max_batch`` alone
    budget: int | None = None


def selection_of(worker: Worker, plugins: PluginHost) -> Selection:
    """How a call picks buckets on ``worker`` now, asked of the plugins for
    each call's cut (keeping it per worker saved too little of a whole call
    to stay: docs/performance.md, *Speed shortcuts and what each buys*)."""
    hello = worker.hello
    assert hello is not None
    return Selection(
        hello,
        plugins.bucket_selector(hello.buckets, worker.spec),
        worker.ceiling,
        request_budget(worker.spec, worker.transport),
    )


def cut(plan: Plan, selection: Selection) -> list[Group]:
    """``plan``'s requests under ``selection``, smallest bucket first: chunks
    of its bucket groups, bounded by the batch size and the request budget;
    refused if an input is over the worker's ceiling and the plan was checked
    against a higher one (or none)."""
    ceiling = selection.ceiling
    if plan.ceiling is None or ceiling < plan.ceiling:
        longest = plan.longest
        if longest.length > ceiling:
            raise over_ceiling(plan.model, longest, ceiling, pair=plan.query is not None)
    if plan.outputs:
        unsupported(plan, selection.hello)
    return group_by_bucket(
        plan.items, selection.select, selection.hello.max_batch, selection.budget
    )


def unsupported(plan: Plan, hello: Hello) -> None:
    """Refuse ``plan`` if its worker does not compute an output it asks for."""
    widths = widths_of(hello)
    missing = [kind.value for kind in plan.outputs if kind not in widths]
    if missing:
        offered = ", ".join(kind.value for kind in widths) or "none"
        raise Refused(
            "unsupported-output",
            f"model {plan.model!r} does not compute {' or '.join(missing)} outputs "
            f"(it computes: {offered}); ask another model for them",
            model=plan.model,
        )


def steps_of(plan: Plan, worker: Worker, plugins: PluginHost) -> list[Group]:
    """``plan``'s requests on ``worker``: cut the first time, then the ones
    kept in the plan for as long as the worker's hello stands (a head start
    that cut the plan and then found something busy leaves its cut to the
    call's task)."""
    hello = worker.hello
    steps = plan.kept_steps(hello)
    if steps is None:
        steps = plan.keep_steps(hello, cut(plan, selection_of(worker, plugins)))
    return steps


def group_by_bucket(
    items: Sequence[Item], select: Callable[[int], int], batch: int, budget: int | None = None
) -> list[Group]:
    """Group items by the bucket ``select`` chooses, smallest bucket first, in
    chunks of at most ``batch`` items (one request each) and, with a
    ``budget``, of at most ``budget`` positions (bucket x items; never fewer
    than one item): a request then takes a bounded time, and other calls get
    the worker between a large call's requests. A bucket's items split over
    several requests go shortest first (the rows land by index); one that
    fits a request keeps input order."""
    if len(items) == 1:  # the common small call: one request, nothing to group
        return [Group(select(items[0].length), items)]
    grouped: dict[int, list[Item]] = {}
    chosen: dict[int, int] = {}  # one hook call per distinct length
    for item in items:
        bucket = chosen.get(item.length)
        if bucket is None:
            bucket = chosen[item.length] = select(item.length)
        grouped.setdefault(bucket, []).append(item)
    steps: list[Group] = []
    for bucket in sorted(grouped):
        group, size = grouped[bucket], chunk_size(bucket, batch, budget)
        if len(group) > size:
            # Split over several requests: shortest first, so each request's
            # rows are of close lengths and the worker pads them to their own
            # longest in one forward slice instead of cutting a mixed request
            # into several (``synapse_cpu`` measured 309 slices against 81 for
            # 2,000 mixed texts). A bucket sent whole keeps input order.
            group.sort(key=attrgetter("length"))
        steps += [Group(bucket, group[i : i + size]) for i in range(0, len(group), size)]
    return steps


def chunk_size(bucket: int, batch: int, budget: int | None) -> int:
    """How many items of ``bucket`` one request takes."""
    return batch if budget is None else max(1, min(batch, budget // bucket))


def join_steps(steps: list[Group], start: int, batch: int, positions: int | None = None) -> None:
    """Join ``steps[start]`` with the steps after it of its bucket, in place,
    up to ``batch`` items and, with ``positions``, as many items as fit that
    many positions (never fewer than the step has): one request where the
    budget cut several. A step taken in part keeps the rest of its items, so
    every input is still sent once and in the same order (the steps stay
    valid if kept for the plan)."""
    first = steps[start]
    batch = max(len(first.items), chunk_size(first.bucket, batch, positions))
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
    its bucket, up to :data:`JOINED_BUDGETS` budgets (in place,
    :func:`join_steps`), unless a small call shares ``worker``
    (:attr:`Worker.shared`: since it was last idle, a small call and another
    call have been in it together). A call's first step keeps to the budget:
    it may have been sent already (the head start), and a small call may
    come just as it starts."""
    assert worker.hello is not None
    if index and not worker.shared:
        budget = request_budget(worker.spec, worker.transport)
        most = None if budget is None else JOINED_BUDGETS * budget
        join_steps(steps, index, worker.hello.max_batch, most)
    return steps[index]


def is_small(plan: Plan, worker: Worker) -> bool:
    """Whether ``plan`` is a small call: one input, or inputs whose sequence
    lengths fit the model's budget (:meth:`Plan.within`; buckets are chosen
    on the worker's hello, which may not have come yet). A small call beside
    another call makes both keep to the budget (:attr:`Worker.shared`); bulk
    calls beside each other alone take turns in requests of up to ``max_batch``."""
    return fits_budget(plan, worker.spec, worker.transport)


def fits_budget(plan: Plan, spec: ModelSpec, transport: Transport) -> bool:
    """:func:`is_small` of a call whose worker is not chosen yet."""
    budget = request_budget(spec, transport)
    return budget is not None and plan.within(budget)


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
        request_id, shape, plan.task, plan.encode(step.items), plan.query, list(plan.outputs)
    )
