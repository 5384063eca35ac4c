"""Planning a composed call: refusals before inference, then bucket groups.

Pure functions of the catalog entry and the inputs. There is no truncation
anywhere here: a sequence that does not fit is refused with its index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from .catalog import Entry
from .errors import Refused


@attrs.frozen
class Item:
    index: int
    tokens: list[int]
    length: int


@attrs.frozen
class Plan:
    model: str
    task: str
    items: tuple[Item, ...]
    query: list[int] | None = None

    @property
    def longest(self) -> Item:
        return max(self.items, key=lambda item: item.length)


@attrs.frozen
class Group:
    bucket: int
    items: tuple[Item, ...]


def over_ceiling(model: str, item: Item, ceiling: int, pair: bool = False) -> Refused:
    what = f"document {item.index} with the query" if pair else f"input {item.index}"
    return Refused(
        "over-ceiling",
        f"{what} has {item.length} tokens, over the ceiling of {ceiling} for "
        f"model {model!r}; split it into shorter texts (Synapse never truncates)",
        model=model,
        index=item.index,
    )


def plan_call(entry: Entry, texts: Sequence[str], query: str | None = None) -> Plan:
    """Tokenise and check every input; raise :class:`Refused` on the first bad one."""
    model = entry.spec.name
    if isinstance(texts, str):
        texts = [texts]
    if not texts:
        what = "documents" if query is not None else "texts"
        raise Refused("empty-input", f"no {what} given; pass at least one", model=model)
    tokenizer = entry.tokenizer
    query_ids: list[int] | None = None
    if query is not None:
        query_ids = tokenizer.encode(query)
        if not query_ids:
            raise Refused("empty-sequence", "the query is empty; give it some text", model=model)
    items = []
    for index, text in enumerate(texts):
        ids = tokenizer.encode(text)
        if not ids:
            raise Refused(
                "empty-sequence",
                f"{'document' if query is not None else 'input'} {index} is empty; "
                "remove it or give it text",
                model=model,
                index=index,
            )
        item = Item(index, ids, tokenizer.sequence_length(ids, query_ids))
        if item.length > entry.spec.ceiling:
            raise over_ceiling(model, item, entry.spec.ceiling, pair=query is not None)
        items.append(item)
    return Plan(model, entry.spec.task, tuple(items), query_ids)


def group_by_bucket(
    items: Sequence[Item], buckets: Sequence[int], select: Callable[[int], int]
) -> list[Group]:
    """Group items by the bucket ``select`` chooses, smallest bucket first."""
    grouped: dict[int, list[Item]] = {}
    chosen: dict[int, int] = {}  # one hook call per distinct length
    for item in items:
        bucket = chosen.get(item.length)
        if bucket is None:
            bucket = chosen[item.length] = select(item.length)
        grouped.setdefault(bucket, []).append(item)
    return [Group(bucket, tuple(grouped[bucket])) for bucket in sorted(grouped)]


def chunks(items: Sequence[Item], size: int) -> list[Sequence[Item]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
