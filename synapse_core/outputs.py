"""Calls for outputs other than one dense vector: sparse vectors, token
vectors, and several outputs of one forward pass (:class:`OutputCalls`, a
part of :class:`~synapse_core.host.Host`), with their results.

A call names the outputs it wants (:class:`~synapse_core.kinds.Kind`); its
plan carries them (``Plan.outputs``), each request asks its worker for them
(``Infer.outputs``), and the worker answers every one from the same forward
pass, in one reply whose rows the call puts back in input order, one list
per output (``Call.rows`` and ``Call.more``). A model whose files say it
lacks an output is refused before a worker starts, one whose worker's hello
lacks it before a request is sent (``unsupported-output``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .bounds import Truncate
from .deadline import Deadline
from .kinds import Kind
from .prompts import prompted
from .starting import Asked, Starts
from .wire import Task

if TYPE_CHECKING:
    from .catalog import Catalog
    from .serving import CallRunner


@attrs.frozen
class SparseVector:
    """A sparse vector: weights at indices (a vocabulary's token ids), the
    indices increasing, none twice, each weight above 0."""

    indices: list[int]
    values: list[float]


@attrs.frozen
class OutputsResult:
    """The outputs of one call, each in input order; ``None`` for one not asked for."""

    model: str
    #: one dense vector per input
    dense: list[list[float]] | None
    #: one sparse vector per input
    sparse: list[SparseVector] | None
    #: per input, one vector per token (a ColBERT head's, else the last hidden state)
    multi: list[list[list[float]]] | None
    #: vector-space identity of the worker that computed them
    identity: str
    #: indexes of the texts cut to the ceiling (only with ``truncate``)
    truncated: tuple[int, ...] = ()
    #: tokens of the inputs, special tokens excluded (after any cut)
    tokens: int = 0


def sparse_vector(row: Any) -> SparseVector:
    """A worker's sparse row, ``(indices, values)``, in index order."""
    indices, values = row
    pairs = sorted(zip(indices, values, strict=True))
    return SparseVector([int(i) for i, _ in pairs], [float(v) for _, v in pairs])


class OutputCalls:
    """The host's calls for named outputs (mixed into ``Host``)."""

    catalog: Catalog
    _runner: CallRunner
    _starts: Starts
    _around: Any
    _accepts: Callable[[str, Task], None]  # the host's

    async def embed_outputs(
        self,
        model: str,
        texts: Sequence[str | Sequence[int]],
        outputs: Sequence[Kind],
        *,
        deadline: Deadline | None = None,
        truncate: Truncate = False,
        prompt_name: str | None = None,
    ) -> OutputsResult:
        """The ``outputs`` (dense, sparse, multi) of each text, all from one
        forward pass per request; the arguments as :meth:`Host.embed`'s."""
        kinds = tuple(dict.fromkeys(Kind(kind) for kind in outputs))
        if not kinds or Kind.SCORE in kinds:
            raise ValueError("ask for one or more of the dense, sparse and multi outputs")
        if prompt_name is not None:
            texts = prompted(self.catalog.entry(model, "embed"), prompt_name, texts)
        asked = Asked(model, "embed", texts, None, deadline, truncate, kinds)
        if self._around is not None:
            self._accepts(model, "embed")
            return await self._around(model, lambda: self._outputs(asked))  # type: ignore[no-any-return]
        return await self._outputs(asked)

    async def embed_sparse(
        self, model: str, texts: Sequence[str | Sequence[int]], **options: Any
    ) -> list[SparseVector]:
        """One sparse vector per text (:meth:`embed_outputs` of ``sparse``)."""
        result = await self.embed_outputs(model, texts, (Kind.SPARSE,), **options)
        assert result.sparse is not None
        return result.sparse

    async def embed_all(
        self, model: str, texts: Sequence[str | Sequence[int]], **options: Any
    ) -> list[list[list[float]]]:
        """Per text, one vector per token (:meth:`embed_outputs` of ``multi``)."""
        result = await self.embed_outputs(model, texts, (Kind.MULTI,), **options)
        assert result.multi is not None
        return result.multi

    async def _outputs(self, asked: Asked) -> OutputsResult:
        call = await self._starts.call(asked)
        tokens = call.plan.tokens  # counted while the worker computes
        await self._runner.wait(call)
        found: dict[Kind, list[Any]] = dict(
            zip(asked.outputs, [call.rows, *call.more], strict=True)
        )
        sparse = found.get(Kind.SPARSE)
        return OutputsResult(
            asked.model,
            found.get(Kind.DENSE),
            None if sparse is None else [sparse_vector(row) for row in sparse],
            found.get(Kind.MULTI),
            call.identity,
            call.plan.truncated,
            tokens,
        )
