"""Embed and rerank many inputs through one host, a batch at a time.

Inputs are checked against the catalog as a whole before the first batch is
sent, so a refusal names the input's position in the whole list (and its file
line) and no batch runs for a call that would be refused later.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import anyio
import anyio.abc
import attrs

from ..bounds import planned
from ..call import EmbedResult, RerankResult
from ..config import HostConfig, Task
from ..deadline import Deadline
from ..errors import IdentityChanged, Refused
from ..host import Host
from ..kinds import Kind
from ..opening import open_host
from ..outputs import OutputsResult
from ..plan import Truncate
from ..plugins import PluginHost
from ..prompts import prompted
from .inputs import Inputs
from .options import deadline_from

_R = TypeVar("_R")

#: texts per host call; small enough for steady progress, large enough to fill
#: a worker's batch several times over
BATCH = 64
#: from this many batches on, the progress line is shown even when stderr is
#: not a terminal, so a log says what a long run is doing
MANY_BATCHES = 10

OnBatch = Callable[[int], None]


def spans(count: int, size: int = BATCH) -> list[range]:
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


def show_progress(batches: int, stderr_is_tty: bool) -> bool:
    return batches > 1 and (stderr_is_tty or batches >= MANY_BATCHES)


def relocate(exc: Refused, inputs: Inputs, offset: int) -> Refused:
    """``exc`` about the batch starting at ``offset``, told about the whole input."""
    if exc.index is None:
        return exc
    index = exc.index + offset
    message = exc.message
    if offset:
        message = re.sub(rf"\binput {exc.index}\b", f"input {index}", message, count=1)
    where = inputs.where(index)
    if where:
        message = f"{message} ({where})"
    return Refused(exc.code, message, model=exc.model, index=index)


@contextmanager
def located(inputs: Inputs, offset: int) -> Iterator[None]:
    try:
        yield
    except Refused as exc:
        raise relocate(exc, inputs, offset) from None


def check_all(
    host: Host, model: str, task: Task, inputs: Inputs, query: str | None, truncate: Truncate
) -> None:
    """Refuse the whole call up front (pure: spawns nothing)."""
    with located(inputs, 0):
        planned(host.catalog.entry(model, task), inputs.items, query, truncate)


def same_identity(previous: str, current: str, model: str) -> str:
    if previous and current != previous:
        raise IdentityChanged(
            f"model {model!r} answered from vector space {current!r} after {previous!r}; "
            "results of one command must not mix spaces, run it again"
        )
    return current


@attrs.frozen
class EmbedAsk:
    """How an embed command's texts are embedded (``Host.embed``'s options)."""

    #: the model's prompt put in front of each text
    prompt_name: str | None = None
    truncate: Truncate = False
    #: each vector cut to this size (Matryoshka); ``None``: the model's own
    dimensions: int | None = None


class Batch(Protocol):
    """What every call result has: its vector space and the inputs it cut."""

    @property
    def identity(self) -> str: ...

    @property
    def truncated(self) -> tuple[int, ...]: ...


_B = TypeVar("_B", bound=Batch)


async def batched(
    model: str,
    inputs: Inputs,
    on_batch: OnBatch,
    call: Callable[[list[Any]], Awaitable[_B]],
    rows_of: Callable[[_B], Sequence[Any]],
) -> tuple[list[Any], str, tuple[int, ...]]:
    """``call`` of each batch of ``inputs`` in turn: every batch's rows, the
    one vector space they share, and the indexes cut, in the whole list's
    numbering (a refusal names its input there too)."""
    rows: list[Any] = []
    identity = ""
    cut: list[int] = []
    for span in spans(len(inputs.items)):
        with located(inputs, span.start):
            result = await call(inputs.items[span.start : span.stop])
        identity = same_identity(identity, result.identity, model)
        rows.extend(rows_of(result))
        cut.extend(span.start + index for index in result.truncated)
        on_batch(len(span))
    return rows, identity, tuple(cut)


def _checked(host: Host, model: str, inputs: Inputs, ask: EmbedAsk) -> Inputs:
    """``inputs`` with the prompt asked for in front, refused up front as a whole."""
    if ask.prompt_name is not None:
        entry = host.catalog.entry(model, "embed")
        inputs = attrs.evolve(inputs, items=prompted(entry, ask.prompt_name, inputs.items))
    check_all(host, model, "embed", inputs, None, ask.truncate)
    return inputs


async def embed_all(
    host: Host,
    model: str,
    inputs: Inputs,
    deadline: Deadline,
    on_batch: OnBatch,
    ask: EmbedAsk = EmbedAsk(),
) -> EmbedResult:
    inputs = _checked(host, model, inputs, ask)
    vectors, identity, cut = await batched(
        model,
        inputs,
        on_batch,
        lambda batch: host.embed(
            model, batch, deadline=deadline, truncate=ask.truncate, dimensions=ask.dimensions
        ),
        lambda result: result.vectors,
    )
    return EmbedResult(model, vectors, identity, cut)


async def outputs_all(
    host: Host,
    model: str,
    inputs: Inputs,
    deadline: Deadline,
    on_batch: OnBatch,
    kind: Kind,
    ask: EmbedAsk = EmbedAsk(),
) -> OutputsResult:
    """:func:`embed_all`'s batches for one output ``kind`` (sparse, or multi:
    every token's vector)."""
    inputs = _checked(host, model, inputs, ask)
    rows, identity, cut = await batched(
        model,
        inputs,
        on_batch,
        lambda batch: host.embed_outputs(
            model, batch, (kind,), deadline=deadline, truncate=ask.truncate
        ),
        lambda result: (result.sparse if kind is Kind.SPARSE else result.multi) or [],
    )
    sparse, multi = (rows, None) if kind is Kind.SPARSE else (None, rows)
    return OutputsResult(model, None, sparse, multi, identity, cut)


async def rerank_all(
    host: Host,
    model: str,
    query: str,
    inputs: Inputs,
    deadline: Deadline,
    on_batch: OnBatch,
    truncate: Truncate = False,
) -> RerankResult:
    check_all(host, model, "rerank", inputs, query, truncate)
    scores, identity, cut = await batched(
        model,
        inputs,
        on_batch,
        lambda batch: host.rerank(model, query, batch, deadline=deadline, truncate=truncate),
        lambda result: result.scores,
    )
    return RerankResult(model, scores, identity, cut)


#: how long a one-shot command lets a late reply drain after its deadline
DRAIN_GRACE_S = 1.0


def bounded(config: HostConfig, deadline_s: float | None) -> HostConfig:
    """A one-shot command ends at its deadline: closing the host drains the
    exchange under way, so bound exchanges by the deadline (plus a grace)
    rather than the catalog's exchange_timeout_s."""
    if deadline_s is None:
        return config
    limit = min(config.exchange_timeout_s, deadline_s + DRAIN_GRACE_S)
    return attrs.evolve(config, exchange_timeout_s=limit)


def serve(
    config: HostConfig,
    plugins: PluginHost,
    deadline_s: float | None,
    work: Callable[[Host, Deadline], Awaitable[_R]],
) -> _R:
    """Open a host for one command, run ``work`` in it, close it."""

    async def main() -> _R:
        deadline = deadline_from(deadline_s)
        async with open_host(bounded(config, deadline_s), plugins=plugins) as host:
            return await work(host, deadline)

    return anyio.run(until_sigterm, main)


async def until_sigterm(main: Callable[[], Awaitable[_R]]) -> _R:
    """Run ``main``, stopping it on SIGTERM as Ctrl-C does.

    ``main`` is cancelled; the host it opened still retires its workers and
    confirms their exits (its close is shielded, and a second SIGTERM during
    it changes nothing), then :class:`KeyboardInterrupt` is raised, so the
    command exits as it does on Ctrl-C. Without this SIGTERM would end the
    process at once and orphan a busy worker.
    """
    terminated = False
    result: list[_R] = []

    async def listen(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        nonlocal terminated
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            task_status.started()
            async for _ in signals:
                terminated = True
                tg.cancel_scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            await tg.start(listen)
            result.append(await main())
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    if terminated or not result:
        raise KeyboardInterrupt
    return result[0]
