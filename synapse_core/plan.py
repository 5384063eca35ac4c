"""Planning a composed call: refusals before inference, then bucket groups.

Every input is sized and checked before anything runs. A tokenizer that
counts cheaply (``CountingTokenizer``) counts a large call's texts, and
their ids are encoded later, chunk by chunk, while earlier chunks run; any
other call is encoded here, once, its ids kept in the plan (in batches
where the tokenizer encodes many texts at once, ``BatchTokenizer``). A
sequence that does not fit is refused with its index, unless the caller
explicitly asked for truncation: then it is cut to the ceiling here, and
the plan lists every index that was cut.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Literal, cast

import attrs

from .catalog import Entry
from .errors import PluginError, Refused
from .inputs import has_surrogate, invalid_text, invalid_token, token_id_limit, tokenizer_failed
from .kinds import Kind
from .tokenizer import BatchTokenizer, CountingTokenizer, Tokenizer
from .wire import Task

#: calls of at most this many texts are encoded while they are planned (a
#: pass of counting first would only cost them; larger calls are encoded
#: chunk by chunk while earlier chunks run). Coalescing relies on it: only
#: a call whose ids are all known joins others (``Coalescer.joins``)
EAGER_TEXTS = 8
#: texts a :class:`~synapse_core.tokenizer.BatchTokenizer` encodes at a time
#: while a call is planned, and the characters a batch stops at (past one
#: text): enough for its threads to share, few enough that a call refused
#: early (say, at a long first text) wastes little
BATCH_TEXTS = 64
BATCH_CHARS = 32 * 1024


@attrs.define(eq=False)
class Item:
    index: int
    text: str
    #: token count, from the tokenizer's ``count``
    count: int
    #: positions the sequence occupies, special tokens (and query) included
    length: int
    #: token ids, encoded when the item's chunk is about to be sent
    # Invariant: once set, never changed (a request may already hold them).
    ids: list[int] | None = None


@attrs.define(eq=False)
class Plan:
    model: str
    task: Task
    items: tuple[Item, ...]
    tokenizer: Tokenizer
    query: list[int] | None = None
    #: indexes of the inputs cut to the ceiling (only when truncation was asked for)
    truncated: tuple[int, ...] = ()
    #: the ceiling every input was checked against (or cut to) when planned;
    #: ``None``: not checked, so cutting the plan into requests checks it
    ceiling: int | None = None
    #: the outputs asked for, in order; empty: the task's own (a dense
    #: vector, or a score), which a worker of any protocol computes
    outputs: tuple[Kind, ...] = ()
    # The requests the plan was cut into (:func:`synapse_core.cut.steps_of`)
    # and the bucket choice they were cut by: a plan is cut once.
    # Invariant: _steps is not None ⇔ _cut_by is not None
    _steps: list[Group] | None = attrs.field(default=None, init=False)
    _cut_by: object = attrs.field(default=None, init=False)

    @property
    def tokens(self) -> int:
        """Tokens of every input as served (after any cut), without special tokens."""
        return sum(item.count for item in self.items)

    @property
    def longest(self) -> Item:
        items = self.items
        # One input (the common call) needs no max() and no key function.
        return items[0] if len(items) == 1 else max(items, key=lambda item: item.length)

    def within(self, budget: int) -> bool:
        """Whether the plan is one request's worth of ``budget`` positions,
        counted in sequence lengths (its buckets' padding is chosen later, on
        the worker): one input always is, as a request never holds less."""
        items = self.items
        if len(items) == 1:
            return True
        for item in items:
            budget -= item.length
            if budget < 0:
                return False
        return True

    def encode(self, items: Sequence[Item]) -> list[list[int]]:
        """The token ids of ``items``, encoded now unless they already are."""
        sequences = []
        for item in items:
            ids = item.ids
            if ids is None:
                try:
                    ids = self.tokenizer.encode(item.text)
                except Exception as exc:
                    raise tokenizer_failed(self.model, f"input {item.index}", exc) from exc
                if len(ids) != item.count:
                    raise PluginError(
                        f"the tokenizer of model {self.model!r} counted {item.count} tokens "
                        f"in input {item.index} but encoded {len(ids)}; its count() and "
                        "encode() must agree"
                    )
                item.ids = ids
            sequences.append(ids)
        return sequences

    @property
    def steps(self) -> list[Group] | None:
        """The requests the plan was last cut into, if it was."""
        return self._steps

    def kept_steps(self, selection: object) -> list[Group] | None:
        """The requests kept by :meth:`keep_steps` for ``selection``, if any."""
        return self._steps if self._cut_by is selection else None

    def keep_steps(self, selection: object, steps: list[Group]) -> list[Group]:
        self._steps, self._cut_by = steps, selection
        return steps

    def encode_ahead(self, items: Sequence[Item]) -> None:
        """Encode ``items`` early (while an earlier request runs); an error
        surfaces when their own request is built."""
        with contextlib.suppress(Exception):
            self.encode(items)


@attrs.define(eq=False)
class Group:
    """One step of a plan (see :mod:`synapse_core.cut`): inputs of one
    bucket, sent as one request."""

    bucket: int
    items: Sequence[Item]


def over_ceiling(model: str, item: Item, ceiling: int, pair: bool = False) -> Refused:
    what = f"document {item.index} with the query" if pair else f"input {item.index}"
    return Refused(
        "over-ceiling",
        f"{what} has {item.length} tokens, over the ceiling of {ceiling} for "
        f"model {model!r}; split it into shorter texts or ask for truncation explicitly "
        "(Synapse never truncates unasked)",
        model=model,
        index=item.index,
    )


#: what ``truncate`` may be: no cut, a cut at the end (True or "end"), or at the start
Truncate = bool | Literal["end", "start"]


def check_truncate(truncate: object) -> None:
    """Raise ``TypeError`` or ``ValueError`` unless ``truncate`` is a :data:`Truncate`."""
    if type(truncate) is bool:
        return
    if not isinstance(truncate, str):
        raise TypeError(f'truncate must be a bool, "end" or "start", got {truncate!r}')
    if truncate not in ("end", "start"):
        raise ValueError(f'truncate must be a bool, "end" or "start", got {truncate!r}')


def truncated_item(
    model: str,
    tokenizer: Tokenizer,
    item: Item,
    ceiling: int,
    query: list[int] | None,
    start: bool = False,
) -> Item:
    """``item`` with its tokens cut at the end (or the ``start``) so the
    sequence fits ``ceiling``; refused when nothing of it would fit (a rerank
    query that fills the ceiling)."""
    ids = item.ids
    if ids is None:
        try:
            ids = tokenizer.encode(item.text)
        except Exception as exc:
            raise tokenizer_failed(model, f"input {item.index}", exc) from exc
    keep = len(ids) - (item.length - ceiling)
    if keep > 0:
        ids = ids[-keep:] if start else ids[:keep]
        length = tokenizer.sequence_length(ids, query)
        if length <= ceiling:
            return Item(item.index, item.text, keep, length, ids)
    raise over_ceiling(model, item, ceiling, pair=query is not None)


def _sequence(texts: object, what: str) -> Sequence[object]:
    """``texts`` as a sequence (one str is one text), or a ``TypeError``.

    Iterators are refused rather than consumed: a refusal would leave the
    caller's iterator half used.
    """
    if type(texts) is list or type(texts) is tuple:  # the common case, without an ABC check
        return texts
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, Sequence) and not isinstance(texts, bytes | bytearray | memoryview):
        return texts
    hint = "; pass list(...) of it" if isinstance(texts, Iterator) else ""
    raise TypeError(f"{what} must be a list of strings, got {type(texts).__name__}{hint}")


def plan_call(
    entry: Entry,
    texts: Sequence[str | Sequence[int]],
    query: str | None = None,
    truncate: Truncate = False,
) -> Plan:
    """Tokenise and check every input; raise :class:`Refused` on the first bad one.

    ``texts`` must be a sequence (a ``TypeError`` says so otherwise); an item
    may be a text or the token ids of the model's own tokenizer (special
    tokens excluded); a list of ids holding one that is not an int in the
    model's vocabulary is refused as ``invalid-token``, any other item, or a
    query that is not valid text, as ``invalid-text``. With ``truncate`` (True or ``"end"``, or
    ``"start"`` to keep the end of the text) an input over the ceiling is cut
    to fit instead of refused, and its index recorded in the plan; any other
    ``truncate`` is a ``TypeError`` or ``ValueError``.
    """
    if truncate is not False:
        check_truncate(truncate)
    model = entry.spec.name
    rerank = entry.spec.task == "rerank"
    texts = cast(
        Sequence[str | Sequence[int]], _sequence(texts, "documents" if rerank else "texts")
    )
    if rerank and query is None:
        raise Refused(
            "missing-query", "no query given; rerank scores documents against a query", model=model
        )
    if query is not None and (refusal := invalid_text(model, query, "the query", None)):
        raise refusal
    if not texts:
        what = "documents" if query is not None else "texts"
        raise Refused("empty-input", f"no {what} given; pass at least one", model=model)
    tokenizer = entry.tokenizer
    query_ids = None if query is None else _query_ids(model, tokenizer, query)
    counting = _counting(tokenizer, len(texts))
    batches = _batches(tokenizer, texts) if counting is None and len(texts) > EAGER_TEXTS else None
    ceiling = entry.ceiling
    items = []
    cut: list[int] = []
    # Each input is checked as soon as it is sized, so the first bad input is
    # the one reported, whatever is wrong with later ones.
    for index, given in enumerate(texts):
        encoded = None if batches is None else next(batches)
        item = _sized(model, tokenizer, counting, query_ids, index, given, encoded)
        if item.length > ceiling:
            if not truncate:
                raise over_ceiling(model, item, ceiling, pair=query is not None)
            item = truncated_item(
                model, tokenizer, item, ceiling, query_ids, start=truncate == "start"
            )
            cut.append(index)
        items.append(item)
    return Plan(model, entry.spec.task, tuple(items), tokenizer, query_ids, tuple(cut), ceiling)


def _query_ids(model: str, tokenizer: Tokenizer, query: str) -> list[int]:
    """The query's token ids; refused when it has none."""
    try:
        query_ids = tokenizer.encode(query)
    except Exception as exc:
        raise tokenizer_failed(model, "the query", exc) from exc
    if not query_ids:
        raise Refused("empty-sequence", "the query is empty; give it some text", model=model)
    return query_ids


def _counting(tokenizer: Tokenizer, texts: int) -> CountingTokenizer | None:
    """``tokenizer`` when the inputs of a call of ``texts`` are to be counted
    now and encoded later; ``None`` when they are encoded now.

    Counting is enough to refuse: a large call's ids are then encoded chunk
    by chunk, while earlier chunks run. A small call is encoded at once
    (counting first would only add a pass), and so is every call of a
    tokenizer that cannot count.
    """
    if texts > EAGER_TEXTS and hasattr(tokenizer, "count") and hasattr(tokenizer, "positions"):
        return cast(CountingTokenizer, tokenizer)
    return None


def _batches(tokenizer: Tokenizer, texts: Sequence[object]) -> Iterator[list[int] | None] | None:
    """Per input, its ids from the tokenizer's ``encode_batch``, encoded a
    batch at a time (:data:`BATCH_TEXTS` texts, or as many as hold
    :data:`BATCH_CHARS` characters) when the plan reaches it, so a call
    refused early wastes one batch at most; ``None`` for an input left to be
    encoded alone: not valid text, or in a batch the tokenizer failed on
    (encoded alone, the input that fails is named). ``None`` for a
    tokenizer without ``encode_batch``."""
    if not hasattr(tokenizer, "encode_batch"):
        return None
    encode_batch = cast(BatchTokenizer, tokenizer).encode_batch

    def batches() -> Iterator[list[int] | None]:
        stop = 0
        while stop < len(texts):
            start, chars = stop, 0
            while stop < len(texts) and stop - start < BATCH_TEXTS and chars < BATCH_CHARS:
                text = texts[stop]
                chars += len(text) if type(text) is str else 0
                stop += 1
            batch = texts[start:stop]
            out: list[list[int] | None] = [None] * len(batch)
            chosen = [i for i, text in enumerate(batch) if _is_text(text)]
            try:
                encoded = encode_batch([cast(str, batch[i]) for i in chosen])
            except Exception:
                encoded = []
            if len(encoded) == len(chosen):
                for i, ids in zip(chosen, encoded, strict=True):
                    out[i] = ids
            yield from out

    return batches()


def _is_text(value: object) -> bool:
    """Valid text (what :func:`_sized` checks again only for an input not
    encoded in a batch)."""
    return type(value) is str and (value.isascii() or not has_surrogate(value))


def _sized(
    model: str,
    tokenizer: Tokenizer,
    counting: CountingTokenizer | None,
    query_ids: list[int] | None,
    index: int,
    given: str | Sequence[int],
    encoded: list[int] | None = None,
) -> Item:
    """Input ``index`` sized (``counting``: counted, not encoded; ``encoded``:
    its ids, from a batch); refused if it is neither valid text nor token
    ids, or if it is empty."""
    noun = "document" if query_ids is not None else "input"
    if type(given) in (list, tuple):
        # Checked here, so a worker never sees an id it cannot look up.
        limit = token_id_limit(model, tokenizer)
        if refusal := invalid_token(model, given, f"{noun} {index}", index, limit):
            raise refusal
    elif (
        encoded is None  # a batch encodes valid text only (``_is_text``)
        and not (isinstance(given, str) and given.isascii())
        and (refusal := invalid_text(model, given, f"{noun} {index}", index))
    ):
        raise refusal
    text = given if isinstance(given, str) else ""
    ids: list[int] | None
    try:
        if not isinstance(given, str):
            ids = list(given)
            n = len(ids)
            length = tokenizer.sequence_length(ids, query_ids)
        elif counting is not None:
            ids = None
            n = counting.count(text)
            length = counting.positions(n, None if query_ids is None else len(query_ids))
        else:
            ids = tokenizer.encode(text) if encoded is None else encoded
            n = len(ids)
            length = tokenizer.sequence_length(ids, query_ids)
    except Exception as exc:
        raise tokenizer_failed(model, f"input {index}", exc) from exc
    if not n:
        raise Refused(
            "empty-sequence",
            f"{noun} {index} is empty; remove it or give it text",
            model=model,
            index=index,
        )
    return Item(index, text, n, length, ids)
