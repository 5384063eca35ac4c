"""The :class:`Family` protocol every family module implements, and the
sizes a family reads from ``config.json`` for the folder reader."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

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

    @property
    def name(self) -> str:
        """The family's part of a model's identity and kind (``bert-mean-norm``)."""
        ...

    @property
    def model_types(self) -> tuple[str, ...]:
        """``config.json`` ``model_type`` values this family reads."""
        ...

    @property
    def cross_encoders(self) -> tuple[str, ...]:
        """``config.json`` architectures served as cross-encoders (rerank models)."""
        ...

    @property
    def prefixes(self) -> tuple[str, ...]:
        """What a task head's checkpoint puts before the body's tensor names."""
        ...

    @property
    def word_embeddings(self) -> str:
        """The word-embedding table's name (its rows: the vocabulary size)."""
        ...

    @property
    def kept_float(self) -> tuple[tuple[int, str], ...]:
        """Int8: (layer, "up" | "down") feed-forward products kept in float32."""
        ...

    @property
    def vocab_padded(self) -> bool:
        """The embedding table has more rows than the tokenizer has tokens
        (padded to a multiple of 64, say), so a smaller tokenizer still fits."""
        ...

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
