"""DeBERTa-v2 and -v3 (``deberta-v2``): a post-LayerNorm encoder whose
attention adds disentangled relative-position terms to the content scores.

Each layer's score of query ``i`` against key ``j`` is, as transformers'
``DisentangledSelfAttention`` computes it,
``(q_i . k_j + q_i . pk[r(i, j)] + k_j . pq[r(i, j)]) / sqrt(head * (1 + terms))``
where ``pk`` and ``pq`` are the layer's key and query projections of the
shared relative-position embeddings (``share_att_key``; otherwise their own
``pos_key_proj`` / ``pos_query_proj``), ``terms`` counts the position terms
``pos_att_type`` names (``c2p``: content to position, ``p2c``: position to
content), and ``r(i, j)`` is the row of ``i - j``: log-bucketed past half of
``position_buckets`` (``make_log_bucket_position``, in float32 as torch
computes it), shifted by the span and clamped to the table. The position
embeddings go through the encoder's ``LayerNorm`` first (``norm_rel_ebd``).

The embeddings are the words (plus absolute positions where
``position_biased_input`` and token types where ``type_vocab_size`` > 0), a
LayerNorm, and the mask multiplied in. A cross-encoder's head is the
``ContextPooler`` (``pooler.dense`` and ``pooler_hidden_act`` on the first
token) and ``classifier``: mixedbread-ai/mxbai-rerank-base-v1 and -large-v1.

Not served (refused naming ``config.json``): the convolution layer of the
DeBERTa-v2 xlarge models (``conv_kernel_size``), an ``embedding_size`` other
than ``hidden_size``, ``relative_attention`` false, and a head size other
than ``hidden_size / num_attention_heads``.

The position terms depend on the weights alone, so each layer's projected
position table is computed once, when the weights are arranged; the scale
is folded into the query projection and the ``p2c`` table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Activation, Classifier
from ..numerics import key_bias, layer_norm, softmax_
from ..weights import F32, I64, Tensors
from .postnorm import heads_graph, layer_end, layer_end_graph
from .protocol import Sizes

#: ``pos_att_type`` entries served
TERMS = ("c2p", "p2c")
#: ``pooler_hidden_act`` values served, as the head's activation
POOLER_ACTIVATIONS: dict[str, Activation] = {"gelu": "gelu", "tanh": "tanh"}


@attrs.frozen
class DebertaConfig:
    """What a DeBERTa-v2 body is, from ``config.json``."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    #: the position terms added to the content scores: a subset of :data:`TERMS`
    terms: tuple[str, ...]
    #: ``position_buckets`` (0: relative positions are not bucketed)
    buckets: int
    #: ``max_relative_positions``, or ``max_position_embeddings`` when below 1
    max_relative: int
    share_att_key: bool
    norm_rel: bool
    position_biased_input: bool
    token_types: int

    @property
    def span(self) -> int:
        """Half the rows of the relative-position table (transformers' ``att_span``)."""
        return self.buckets if self.buckets > 0 else self.max_relative

    @property
    def scale(self) -> float:
        """What every score is multiplied by: one over sqrt(head size x (1 + terms))."""
        return 1.0 / float(np.sqrt(np.float32(self.hidden // self.heads * (1 + len(self.terms)))))


@attrs.frozen
class Layer:
    """One layer's weights, matrices as (in, out); the query's columns scaled."""

    qkv_w: F32  # (hidden, 3 * hidden): query (scaled), key, value side by side
    qkv_b: F32
    #: (heads, head, 2 * span): each head's position keys, transposed (c2p)
    pos_key: F32 | None
    #: (heads, head, 2 * span): each head's position queries, scaled, transposed (p2c)
    pos_query: F32 | None
    out_w: F32
    out_b: F32
    ln1_g: F32
    ln1_b: F32
    up_w: F32
    up_b: F32
    down_w: F32
    down_b: F32
    ln2_g: F32
    ln2_b: F32


@attrs.frozen
class DebertaBody:
    """A DeBERTa-v2 encoder's arranged weights."""

    config: DebertaConfig
    word: F32
    #: ``None`` unless ``position_biased_input``
    position: F32 | None
    #: ``None``: no token types (``type_vocab_size`` 0)
    token_type: F32 | None
    ln_g: F32
    ln_b: F32
    layers: tuple[Layer, ...]
    #: (2 * positions - 1,) the position table's row for ``i - j``, at ``i - j + positions - 1``
    rows: I64

    def relative_rows(self, width: int) -> I64:
        """(width, width): the table row of query ``i`` and key ``j``."""
        first = len(self.rows) // 2  # i - j == 0
        steps = np.arange(width)
        out: I64 = self.rows[first + steps[:, None] - steps[None, :]]
        return out


def deberta_config(data: Mapping[str, Any], source: str) -> DebertaConfig:
    """Reads and checks ``config.json``; :class:`ModelFilesError` says what is not served."""
    try:
        hidden = int(data["hidden_size"])
        heads = int(data["num_attention_heads"])
        terms_raw = data.get("pos_att_type") or []
        if isinstance(terms_raw, str):  # older configs: "p2c|c2p"
            terms_raw = terms_raw.split("|")
        terms = tuple(str(t).strip().lower() for t in terms_raw)
        table = int(data["max_position_embeddings"])
        most = int(data.get("max_relative_positions", -1))
        norms = str(data.get("norm_rel_ebd", "none")).lower().split("|")
        config = DebertaConfig(
            hidden=hidden,
            heads=heads,
            layers=int(data["num_hidden_layers"]),
            intermediate=int(data["intermediate_size"]),
            eps=float(data.get("layer_norm_eps", 1e-7)),
            terms=tuple(t for t in TERMS if t in terms),
            buckets=max(int(data.get("position_buckets", -1)), 0),
            max_relative=most if most >= 1 else table,
            share_att_key=bool(data.get("share_att_key", False)),
            norm_rel="layer_norm" in (n.strip() for n in norms),
            position_biased_input=bool(data.get("position_biased_input", True)),
            token_types=int(data.get("type_vocab_size", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(source, f"not a DeBERTa-v2 config: missing or bad {exc}") from None
    unknown = [t for t in terms if t not in TERMS]
    problems = [
        (unknown, f"pos_att_type {unknown} is not supported; supported: c2p, p2c"),
        (hidden % heads, "hidden_size is not a multiple of num_attention_heads"),
        (
            str(data.get("pooler_hidden_act", "gelu")) not in POOLER_ACTIVATIONS,
            f"pooler_hidden_act {data.get('pooler_hidden_act')!r} is not supported; "
            f"supported: {', '.join(POOLER_ACTIVATIONS)}",
        ),
        (
            data.get("hidden_act", "gelu") != "gelu",
            f"hidden_act {data.get('hidden_act')!r} is not supported; supported: gelu",
        ),
        (
            not data.get("relative_attention", False),
            "relative_attention false is not supported; supported: true (DeBERTa-v3)",
        ),
        (
            int(data.get("conv_kernel_size", 0) or 0) > 0,
            "conv_kernel_size (the convolution layer of DeBERTa-v2 xlarge) is not supported; "
            "supported: none",
        ),
        (
            data.get("embedding_size", hidden) != hidden,
            "embedding_size other than hidden_size (embed_proj) is not supported",
        ),
        (
            data.get("attention_head_size", hidden // max(heads, 1)) != hidden // max(heads, 1),
            "attention_head_size other than hidden_size / num_attention_heads is not supported",
        ),
    ]
    for problem, message in problems:
        if problem:
            raise ModelFilesError(source, message)
    return config


def log_bucket(relative: npt.NDArray[np.int64], buckets: int, most: int) -> npt.NDArray[np.int64]:
    """transformers' ``make_log_bucket_position``: distances under half the
    buckets kept, longer ones on a log scale up to ``most``. In float32, as
    torch computes it (a product landing on an integer keeps its ``ceil``)."""
    sign = np.sign(relative)
    mid = buckets // 2
    near = (relative < mid) & (relative > -mid)
    distance = np.where(near, mid - 1, np.abs(relative))
    ratio = np.log(distance.astype(np.float32) / np.float32(mid))
    ratio /= np.log(np.float32((most - 1) / mid))
    ratio *= np.float32(mid - 1)
    far = np.ceil(ratio) + np.float32(mid)
    out: npt.NDArray[np.int64] = np.where(distance <= mid, relative, far * sign).astype(np.int64)
    return out


def relative_rows(config: DebertaConfig, positions: int) -> I64:
    """The position table's row for every ``i - j`` from ``-(positions - 1)``
    to ``positions - 1``: ``clamp(bucket(i - j) + span, 0, 2 * span - 1)``
    (c2p's index; p2c's for ``(i, j)`` is the same, since the bucketing is odd)."""
    relative = np.arange(-(positions - 1), positions, dtype=np.int64)
    if config.buckets > 0:
        relative = log_bucket(relative, config.buckets, config.max_relative)
    span = config.span
    out: I64 = np.clip(relative + span, 0, 2 * span - 1)
    return out


def _heads_columns(table: F32, heads: int) -> F32:
    """(rows, hidden) projected positions as (heads, head, rows): one matrix per head."""
    rows = table.shape[0]
    return np.ascontiguousarray(table.reshape(rows, heads, -1).transpose(1, 2, 0))


@attrs.frozen
class Deberta:
    """The :class:`~synapse_models.families.Family` of DeBERTa-v2 (and -v3) encoders."""

    name: str = "deberta-v2"
    model_types: tuple[str, ...] = ("deberta-v2",)
    cross_encoders: tuple[str, ...] = ("DebertaV2ForSequenceClassification",)
    prefixes: tuple[str, ...] = ("deberta.",)
    word_embeddings: str = "embeddings.word_embeddings.weight"
    kept_float: tuple[tuple[int, str], ...] = ((0, "down"), (2, "up"))
    # The hub's table is padded past the tokenizer (128100 rows for 128001 tokens).
    vocab_padded: bool = True

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        c = deberta_config(config, source)
        try:
            positions = int(config["max_position_embeddings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"missing or bad {exc}") from None
        return Sizes(c.hidden, positions, 0)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> DebertaBody:
        c = deberta_config(config, tensors.source)
        get, linear = tensors.get, tensors.linear
        relative = get("encoder.rel_embeddings.weight")
        if relative.shape != (2 * c.span, c.hidden):
            raise ModelFilesError(
                tensors.source,
                f"encoder.rel_embeddings is {relative.shape}, but config.json's position_buckets "
                f"and max_relative_positions make it {(2 * c.span, c.hidden)}",
            )
        if c.norm_rel:
            relative = layer_norm(
                relative, get("encoder.LayerNorm.weight"), get("encoder.LayerNorm.bias"), c.eps
            )
        scale = np.float32(c.scale)
        layers = []
        for i in range(c.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (linear(p + f"attention.self.{n}_proj") for n in ("query", "key", "value"))
            pos_key = pos_query = None
            if "c2p" in c.terms:
                w, b = k if c.share_att_key else linear(p + "attention.self.pos_key_proj")
                pos_key = _heads_columns(relative @ w + b, c.heads)
            if "p2c" in c.terms:
                w, b = q if c.share_att_key else linear(p + "attention.self.pos_query_proj")
                pos_query = _heads_columns((relative @ w + b) * scale, c.heads)
            out_w, out_b = linear(p + "attention.output.dense")
            up_w, up_b = linear(p + "intermediate.dense")
            down_w, down_b = linear(p + "output.dense")
            layers.append(
                Layer(
                    qkv_w=np.ascontiguousarray(np.concatenate([q[0] * scale, k[0], v[0]], axis=1)),
                    qkv_b=np.concatenate([q[1] * scale, k[1], v[1]]),
                    pos_key=pos_key,
                    pos_query=pos_query,
                    out_w=out_w,
                    out_b=out_b,
                    ln1_g=get(p + "attention.output.LayerNorm.weight"),
                    ln1_b=get(p + "attention.output.LayerNorm.bias"),
                    up_w=up_w,
                    up_b=up_b,
                    down_w=down_w,
                    down_b=down_b,
                    ln2_g=get(p + "output.LayerNorm.weight"),
                    ln2_b=get(p + "output.LayerNorm.bias"),
                )
            )
        position = None
        if c.position_biased_input:
            position = get("embeddings.position_embeddings.weight")
        token_type = None
        if c.token_types > 0:
            token_type = get("embeddings.token_type_embeddings.weight")
        body = DebertaBody(
            config=c,
            word=get("embeddings.word_embeddings.weight"),
            position=position,
            token_type=token_type,
            ln_g=get("embeddings.LayerNorm.weight"),
            ln_b=get("embeddings.LayerNorm.bias"),
            layers=tuple(layers),
            rows=relative_rows(c, sizes.positions),
        )
        if body.word.shape[1] != c.hidden:
            raise ModelFilesError(
                tensors.source, "the word embeddings do not match config.json's hidden_size"
            )
        return body

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        """The ``ContextPooler`` (``pooler.dense``, ``pooler_hidden_act``) on the
        first token, then ``classifier``."""
        # deberta_config checked it when the folder was read
        activation = POOLER_ACTIVATIONS[str(config.get("pooler_hidden_act", "gelu"))]
        dense_w, dense_b = tensors.linear("pooler.dense")
        out_w, out_b = tensors.linear("classifier")
        return Classifier(dense_w, dense_b, activation, out_w, out_b)

    def token_types(self, body: DebertaBody) -> bool:
        return body.token_type is not None

    def hidden_states(self, body: DebertaBody, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, head = c.heads, c.hidden // c.heads
        x = body.word[ids]
        if body.position is not None:
            x += body.position[:width]
        if body.token_type is not None:
            x += body.token_type[types]
        x = layer_norm(x, body.ln_g, body.ln_b, c.eps) * mask[:, :, None]
        x = x.reshape(rows * width, c.hidden)
        bias = key_bias(mask)
        table = body.relative_rows(width)
        steps = np.arange(width)
        for layer in body.layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(rows, width, 3, heads, head)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)  # (rows, heads, width, head), scaled
            k = qkv[:, :, 1].transpose(0, 2, 1, 3)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            scores = q @ k.transpose(0, 1, 3, 2)
            if layer.pos_key is not None:
                # c2p: query i against the position row of (i, j)
                scores += (q @ layer.pos_key)[:, :, steps[:, None], table]
            if layer.pos_query is not None:
                # p2c: key j against the position row of (i, j)
                scores += (k @ layer.pos_query)[:, :, steps[None, :], table]
            scores += bias
            softmax_(scores)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
            x = layer_end(x, context, layer, c.eps)
        out: F32 = x.reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: DebertaBody) -> str:
        c = body.config
        head = c.hidden // c.heads
        width = g.width()
        x = g.op("Gather", g.const(body.word), "input_ids", axis=0)
        if body.position is not None:
            positions = g.op("Slice", g.const(body.position), g.i64(0), width, g.i64(0))
            x = g.op("Add", x, positions)
        if body.token_type is not None:
            x = g.op("Add", x, g.op("Gather", g.const(body.token_type), "token_type_ids", axis=0))
        x = g.layer_norm(x, body.ln_g, body.ln_b, c.eps)
        x = g.op("Mul", x, g.op("Unsqueeze", "attention_mask", g.i64(2)))
        bias = g.key_bias()
        # The (width, width) table rows: rows[i - j + first], for every layer.
        steps = g.op(
            "Range",
            g.const(np.array(0, dtype=np.int64)),
            g.op("Squeeze", width),
            g.const(np.array(1, dtype=np.int64)),
        )
        offsets = g.op(
            "Sub", g.op("Unsqueeze", steps, g.i64(1)), g.op("Unsqueeze", steps, g.i64(0))
        )
        first = g.const(np.array(len(body.rows) // 2, dtype=np.int64))
        table = g.op("Gather", g.const(body.rows), g.op("Add", offsets, first), axis=0)
        table_t = g.op("Transpose", table, perm=[1, 0])
        split_heads = g.i64(0, 0, c.heads, head)
        merge_heads = g.i64(0, 0, c.hidden)
        expanded: tuple[str, str] | None = None
        for layer in body.layers:
            q, k, v = heads_graph(g, x, layer, c.hidden, split_heads)
            scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
            if expanded is None:
                shape = g.op("Shape", scores)
                expanded = (g.op("Expand", table, shape), g.op("Expand", table_t, shape))
            if layer.pos_key is not None:
                c2p = g.op("MatMul", q, _constant(g, layer.pos_key))
                scores = g.op("Add", scores, g.op("GatherElements", c2p, expanded[0], axis=-1))
            if layer.pos_query is not None:
                # Gathered as (key j, query i), then turned to (i, j).
                p2c = g.op("MatMul", k, _constant(g, layer.pos_query))
                p2c = g.op("GatherElements", p2c, expanded[1], axis=-1)
                scores = g.op("Add", scores, g.op("Transpose", p2c, perm=[0, 1, 3, 2]))
            probs = g.op("Softmax", g.op("Add", scores, bias), axis=-1)
            x = layer_end_graph(g, x, probs, v, merge_heads, layer, c.eps)
        return x


def _constant(g: Graph, value: F32) -> str:
    """A constant behind an ``Identity``: int8's dynamic quantization takes an
    initializer operand of a product for weights, and these position tables
    are small products of activations, kept in float32."""
    return g.op("Identity", g.const(value))


DEBERTA_V2 = Deberta()
