"""Matryoshka dimensions: a vector cut to its first ``dimensions`` values and
normalised to unit length again, for a model trained to be cut so
(Qwen3-Embedding, EmbeddingGemma, nomic-embed-text-v1.5...).

What a model may be cut to is its catalog entry's ``matryoshka_dims``, else
what its files say (``ModelTraits.matryoshka_dims``: a transport reads
``config.json``'s ``matryoshka_dimensions``, the key vLLM reads). Asking a
model for its own size is always accepted (OpenAI clients send it); any
other size is refused (``unsupported-dimensions``), before the call when
the model's size is known (its worker has said it), else once its rows are
back. Cutting then normalising is what sentence-transformers
(``truncate_dim`` with ``normalize_embeddings``), TEI (``normalize``) and
OpenAI (``dimensions``) do; a model whose files say its vectors are not
unit length (``ModelTraits.normalized`` false) has them cut only.
"""

from __future__ import annotations

import math

from .catalog import Entry
from .errors import Refused
from .naming import shown


def matryoshka_sizes(entry: Entry) -> tuple[int, ...]:
    """The sizes ``entry``'s model may be cut to, smallest first (none: it is never cut)."""
    return tuple(sorted(set(entry.spec.matryoshka_dims or entry.traits.matryoshka_dims)))


def check(entry: Entry, dimensions: int, size: int | None) -> None:
    """Refuse ``dimensions`` unless it is the model's own ``size`` or one it
    may be cut to; with ``size`` unknown (``None``), only a size it could
    never be (one it is not said to be cut to) could be refused, and that
    waits for its rows."""
    if size is None or dimensions == size:
        return
    if dimensions not in matryoshka_sizes(entry) or dimensions > size:
        raise _unsupported(entry, dimensions, size)


def applied(entry: Entry, dimensions: int | None, rows: list[list[float]]) -> list[list[float]]:
    """``rows``, each cut to ``dimensions`` values, once :func:`check`
    accepts it against their own size, and normalised to unit length again
    (a zero vector stays zero) unless the model's own vectors are not
    (``ModelTraits.normalized``); ``rows`` as they are for ``None`` or their size."""
    if dimensions is None or not rows:
        return rows
    size = len(rows[0])
    check(entry, dimensions, size)
    if dimensions == size:
        return rows
    if entry.traits.normalized is False:  # a raw model's vectors stay raw
        return [row[:dimensions] for row in rows]
    return [_unit(row[:dimensions]) for row in rows]


def _unit(values: list[float]) -> list[float]:
    norm = math.sqrt(math.fsum(v * v for v in values))
    return [v / norm for v in values] if norm > 0 else values


def _unsupported(entry: Entry, dimensions: int, size: int) -> Refused:
    model = entry.spec.name
    sizes = matryoshka_sizes(entry)
    can = (
        f"it may be cut to {', '.join(str(d) for d in sizes)}"
        if sizes
        else "it was not trained to be cut (give its catalog entry matryoshka_dims if it was)"
    )
    return Refused(
        "unsupported-dimensions",
        f"dimensions {dimensions} is not supported: model {shown(model)} gives {size}-"
        f"dimensional vectors and {can}; leave dimensions out or ask for one of these",
        model=model,
    )
