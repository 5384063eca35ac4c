"""Model families: one module each, every one implementing :class:`Family`,
registered here by the ``model_type`` that ``config.json`` names.

A family knows everything about its architecture and nothing about a device:
how to read and check its ``config.json``, where its position table starts,
how to arrange its checkpoint's tensors (by the hub's own names), its body's
forward pass in numpy and as an ONNX graph, its classification head, and
which matrix products int8 keeps in float32. What follows the body (pooling,
Dense modules, Normalize) is shared (:mod:`synapse_models.heads`). Adding a
family is one module here and one line in :data:`FAMILIES`
(docs/models.md says how, and how to prove it against a reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Classifier
from ..packing import PairTemplate
from ..weights import F32, I64, Tensors


@attrs.frozen
class Sizes:
    """What the folder reader needs of a family's config, read from ``config.json``."""

    hidden: int
    #: positions a sequence may have (after ``offset``)
    positions: int
    #: the position table's row of a sequence's first token (XLM-R and MPNet
    #: skip the padding index's rows: ``pad_token_id + 1``)
    offset: int = 0
    #: a decoder (causal attention): it reads no start token, so its
    #: tokenizer need not add one (Qwen3's appends ``<|endoftext|>`` only)
    causal: bool = False
    #: a causal language model's prompt for scoring a pair: a folder of this
    #: family without sentence-transformers modules is served as an LLM
    #: reranker with it (``None``: the family has none)
    template: PairTemplate | None = None


class Family(Protocol):
    """One architecture family: a module of :mod:`synapse_models.families`.

    The numpy forward pass (:meth:`hidden_states`) and the ONNX graph
    (:meth:`graph`) compute the same token vectors; both see ``ids`` and
    ``types`` (int64) and ``mask`` (float32, 1 for a real position), all
    (rows, width), right-padded. Padding must not change a real position's
    vector: mask padding keys out of attention (a decoder also masks later
    keys: right padding then changes nothing, as rotary positions are
    relative and a row's last real token is its ``lasttoken``).
    """

    #: the family's part of a model's identity and kind (``bert-mean-norm``)
    name: str
    #: ``config.json`` ``model_type`` values this family reads
    model_types: tuple[str, ...]
    #: ``config.json`` architectures served as cross-encoders (rerank models)
    cross_encoders: tuple[str, ...]
    #: what a task head's checkpoint puts before the body's tensor names
    prefixes: tuple[str, ...]
    #: the word-embedding table's name (its rows: the vocabulary size)
    word_embeddings: str
    #: int8: (layer, "up" | "down") feed-forward products kept in float32
    kept_float: tuple[tuple[int, str], ...]
    #: the embedding table has more rows than the tokenizer has tokens
    #: (padded to a multiple of 64, say), so a smaller tokenizer still fits
    vocab_padded: bool

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        """Check ``config.json`` (raise :class:`ModelFilesError` naming ``source``
        and what is supported) and read what the folder reader needs."""
        ...

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> Any:
        """The body's weights, taken from ``tensors`` (which names the file
        when one is missing), as :meth:`hidden_states` and :meth:`graph` use them."""
        ...

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        """A ``*ForSequenceClassification`` checkpoint's head."""
        ...

    def token_types(self, body: Any) -> bool:
        """Whether the body reads ``token_type_ids``."""
        ...

    def hidden_states(self, body: Any, ids: I64, types: I64, mask: F32) -> F32:
        """The last layer's token vectors (rows, width, hidden), in numpy."""
        ...

    def graph(self, g: Graph, body: Any) -> str:
        """Writes the body into ``g``; the name of its (rows, width, hidden) output."""
        ...


def _registry() -> dict[str, Family]:
    from . import encoder, qwen3

    families: tuple[Family, ...] = (
        encoder.BERT,
        encoder.XLM_ROBERTA,
        encoder.MPNET,
        qwen3.QWEN3,
    )
    return {model_type: f for f in families for model_type in f.model_types}


#: every family, by the ``model_type`` its ``config.json`` names
FAMILIES: dict[str, Family] = _registry()


def family_for(config: Mapping[str, Any], source: str) -> Family:
    """The family of a ``config.json``, or :class:`ModelFilesError` listing the supported ones."""
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        names = ", ".join(FAMILIES)
        raise ModelFilesError(
            source,
            f"model_type {model_type!r} is not supported; supported: {names} "
            "(docs/models.md lists the hub models of each)",
        )
    return family


def cross_encoders() -> tuple[str, ...]:
    """Every architecture served as a cross-encoder, in registry order."""
    seen = dict.fromkeys(a for f in FAMILIES.values() for a in f.cross_encoders)
    return tuple(seen)
