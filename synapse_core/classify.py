"""Classification calls (:class:`ClassifyCalls`, a part of
:class:`~synapse_core.host.Host`), and their results.

A classify call is an embed call whose rows are a classifier's logits, one
value per label (the worker's ``dims`` is its label count): it travels as
one (``Infer.task`` ``"classify"``), is cut, checked and put back in input
order as an embed call is. An input may be a text or a pair of texts (an
NLI model's premise and hypothesis). The texts of a call go as one call;
its pairs as one call per distinct first text, which travels as a rerank
call's query does: each pair is framed as a cross-encoder frames one, and
the first text is never cut (``truncate`` cuts the second). The calls run
one after another, and their rows are put back at their inputs' places.
Every call is planned before any runs, so a refusal (``over-ceiling``,
``empty-sequence``...) comes before inference, naming the first bad input
by its index in the caller's list, as any call's refusal does.

The scores are the softmax of each row's logits, or each logit's sigmoid
for a multi-label model (``ModelTraits.multi_label``), as transformers'
text-classification pipeline and TEI's ``/predict`` give them; with
``raw_scores``, the logits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .bounds import Truncate, planned
from .deadline import Deadline
from .errors import PluginError, Refused
from .plan import Plan
from .scoring import sigmoid
from .starting import Asked, Starts
from .wire import Task

if TYPE_CHECKING:
    from .catalog import Catalog
    from .serving import CallRunner

#: one input of a classify call: a text, or a pair of texts
ClassifyInput = str | Sequence[str]


@attrs.frozen
class Prediction:
    """One label of an input and its score."""

    label: str
    score: float


@attrs.frozen
class ClassifyResult:
    """A classify call's labels per input, in input order."""

    model: str
    #: per input, every label with its score, best first
    predictions: list[list[Prediction]]
    #: per input, the model's logits in label order
    logits: list[list[float]]
    #: identity of the worker that computed them
    identity: str
    #: indexes of the inputs cut to the ceiling (only with ``truncate``)
    truncated: tuple[int, ...] = ()
    #: tokens of the inputs, special tokens excluded (after any cut)
    tokens: int = 0


def pair_of(item: object) -> tuple[str, str] | None:
    """``item`` as a pair of texts, if it is one (a list or tuple of two str)."""
    if isinstance(item, list | tuple) and len(item) == 2:
        first: object = item[0]
        second: object = item[1]
        if isinstance(first, str) and isinstance(second, str):
            return first, second
    return None


def groups_of(inputs: Sequence[object]) -> list[tuple[str | None, list[int]]]:
    """The calls a classify call is made of: its texts' indexes (first text
    ``None``), then per distinct first text, the indexes of its pairs."""
    singles: list[int] = []
    pairs: dict[str, list[int]] = {}
    for index, item in enumerate(inputs):
        pair = pair_of(item)
        if pair is None:
            singles.append(index)
        else:
            pairs.setdefault(pair[0], []).append(index)
    groups: list[tuple[str | None, list[int]]] = [(None, singles)] if singles else []
    return groups + list(pairs.items()) or [(None, [])]


def scores_of(logits: Sequence[float], multi_label: bool) -> list[float]:
    """The probabilities of a row's labels: each one's sigmoid, or the softmax."""
    if multi_label:
        return [sigmoid(x) for x in logits]
    top = max(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def predictions_of(
    row: Sequence[float], labels: Sequence[str], multi_label: bool, raw: bool
) -> list[Prediction]:
    """A row's labels with their scores (``raw``: the logits), best first."""
    scores = list(row) if raw else scores_of(row, multi_label)
    ranked = sorted(zip(labels, scores, strict=True), key=lambda pair: -pair[1])
    return [Prediction(label, float(score)) for label, score in ranked]


_LEAD = re.compile(r"^(?:document|input) \d+( with the query)?")


def renumbered(exc: Refused, indexes: Sequence[int], pair: bool) -> Refused:
    """A group's refusal naming the input by its index in the whole call (a
    pair's first text is a group's query: ``None`` index)."""
    index = indexes[exc.index] if exc.index is not None else (indexes[0] if pair else None)

    def named(match: re.Match[str]) -> str:
        if not pair:
            return f"input {index}"
        return f"pair {index}" if match.group(1) else f"the second text of pair {index}"

    message = _LEAD.sub(named, exc.message, count=1)
    if pair and exc.index is None:
        message = message.replace("the query", f"the first text of pair {index}", 1)
    return Refused(exc.code, message, model=exc.model, index=index)


class ClassifyCalls:
    """The host's classify calls (mixed into ``Host``)."""

    catalog: Catalog
    _runner: CallRunner
    _starts: Starts
    _around: Any
    _accepts: Callable[[str, Task], None]  # the host's

    async def classify(
        self,
        model: str,
        inputs: Sequence[ClassifyInput],
        *,
        raw_scores: bool = False,
        deadline: Deadline | None = None,
        truncate: Truncate = False,
    ) -> ClassifyResult:
        """Classify each input, a text or a pair of texts: per input, the
        model's labels with their probabilities (the softmax of the logits,
        or each label's sigmoid for a multi-label model; ``raw_scores``: the
        logits), best first. ``truncate`` as :meth:`Host.rerank`'s: a text
        (or a pair's second text) over the ceiling is cut instead of
        refused; a pair's first text is never cut."""
        if isinstance(inputs, str):
            inputs = [inputs]
        if self._around is not None:
            self._accepts(model, "classify")
            return await self._around(  # type: ignore[no-any-return]
                model, lambda: self._classify(model, inputs, raw_scores, deadline, truncate)
            )
        return await self._classify(model, inputs, raw_scores, deadline, truncate)

    async def _classify(
        self,
        model: str,
        inputs: Sequence[ClassifyInput],
        raw_scores: bool,
        deadline: Deadline | None,
        truncate: Truncate,
    ) -> ClassifyResult:
        self._accepts(model, "classify")
        entry = self.catalog.entry(model, "classify")
        calls: list[tuple[Asked, Plan, list[int]]] = []
        refusals: list[Refused] = []
        for first, indexes in groups_of(inputs):
            texts = [inputs[i] if first is None else inputs[i][1] for i in indexes]
            asked = Asked(model, "classify", texts, first, deadline, truncate)  # type: ignore[arg-type]
            try:  # every group planned before any runs
                large = await self._starts.plan_large(asked)
                plan = large or planned(entry, texts, first, truncate)  # type: ignore[arg-type]
            except Refused as exc:
                refusals.append(renumbered(exc, indexes, first is not None))
                continue
            calls.append((asked, plan, indexes))
        if refusals:
            raise min(refusals, key=lambda r: -1 if r.index is None else r.index)
        logits: list[list[float]] = [[] for _ in inputs]
        truncated: list[int] = []
        tokens, identity = 0, ""
        for asked, plan, indexes in calls:
            call = await self._starts.call(asked, plan)
            tokens += plan.tokens + len(plan.query or ()) * len(plan.items)
            await self._runner.wait(call)
            for local, row in enumerate(call.rows):
                logits[indexes[local]] = list(row)  # type: ignore[arg-type]
            truncated.extend(indexes[i] for i in plan.truncated)
            identity = call.identity
        traits = self.catalog.entries[model].traits
        width = len(logits[0])
        labels = traits.labels or tuple(f"LABEL_{i}" for i in range(width))
        if width != len(labels):
            raise PluginError(
                f"the worker of model {model!r} gave {width} logits for {len(labels)} labels"
            )
        predicted = [predictions_of(r, labels, traits.multi_label, raw_scores) for r in logits]
        return ClassifyResult(model, predicted, logits, identity, tuple(sorted(truncated)), tokens)
