"""BERT, XLM-RoBERTa and MPNet: one post-LayerNorm encoder with learned
absolute positions and an erf-GELU feed-forward block.

What differs between the three is the checkpoint, arranged here:

- **BERT** (``bert``): positions from 0, token types (a pair's second
  segment is type 1); a cross-encoder's head is the pooler (``tanh``) and
  ``classifier``.
- **XLM-RoBERTa** (``xlm-roberta``): positions start after the padding
  index (``pad_token_id + 1``, as transformers'
  ``create_position_ids_from_input_ids``); one token type; a cross-encoder's
  head is ``classifier.dense`` (``tanh``) and ``classifier.out_proj``.
- **MPNet** (``mpnet``): positions as XLM-R's, no token types, attention
  named ``attn.q/k/v/o``, and a relative position bias (T5-style buckets)
  added to every layer's attention scores.

Padding is masked out of attention (its scores get the float32 minimum, so
their softmax weight is exactly zero), so a text's vector does not depend on
its batch mates or on how far it was padded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Classifier
from ..numerics import key_bias, layer_norm, softmax_
from ..weights import F32, I64, Tensors
from .postnorm import heads_graph, layer_end, layer_end_graph
from .protocol import Sizes


@attrs.frozen
class EncoderConfig:
    """The sizes of a BERT-family encoder, from ``config.json``."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float


@attrs.frozen
class Layer:
    """One encoder layer's weights, matrices as (in, out)."""

    qkv_w: F32  # (hidden, 3 * hidden): query, key, value side by side
    qkv_b: F32
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
class RelativeBias:
    """MPNet's relative position bias, shared by every layer: ``weight[buckets]``."""

    buckets: I64  # (positions, positions) bucket of key j seen from query i
    weight: F32  # (buckets, heads)

    def for_width(self, width: int) -> F32:
        """(1, heads, width, width), added to the attention scores."""
        out: F32 = self.weight[self.buckets[:width, :width]].transpose(2, 0, 1)[None]
        return out


@attrs.frozen
class EncoderBody:
    """An encoder's arranged weights."""

    config: EncoderConfig
    word: F32
    #: rows from the architecture's first position on (XLM-R and MPNet skip
    #: the padding index's): row ``i`` is the ``i``-th position of a sequence
    position: F32
    #: ``None``: no token types (MPNet)
    token_type: F32 | None
    ln_g: F32
    ln_b: F32
    layers: tuple[Layer, ...]
    relative: RelativeBias | None = None


def encoder_config(data: Mapping[str, Any], source: str) -> EncoderConfig:
    try:
        config = EncoderConfig(
            hidden=int(data["hidden_size"]),
            heads=int(data["num_attention_heads"]),
            layers=int(data["num_hidden_layers"]),
            intermediate=int(data["intermediate_size"]),
            eps=float(data.get("layer_norm_eps", 1e-12)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(source, f"not an encoder config: missing or bad {exc}") from None
    if config.hidden % config.heads:
        raise ModelFilesError(source, "hidden_size is not a multiple of num_attention_heads")
    return config


def relative_buckets(
    positions: int, buckets: int = 32, max_distance: int = 128
) -> npt.NDArray[np.int64]:
    """MPNet's ``relative_position_bucket`` of key ``j`` seen from query ``i``,
    for every ``i, j < positions``: half the buckets for each direction, exact
    up to a quarter of them, logarithmic beyond, up to ``max_distance``."""
    relative = np.arange(positions)[None, :] - np.arange(positions)[:, None]
    n = -relative
    half = buckets // 2
    out = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    # In float32, as torch computes it (only rows with n >= exact use it).
    scaled = np.log(np.maximum(n, 1).astype(np.float32) / np.float32(exact))
    scaled /= np.float32(math.log(max_distance / exact))
    scaled *= np.float32(half - exact)
    large = exact + scaled.astype(np.int64)
    large = np.minimum(large, half - 1)
    out += np.where(n < exact, n, large)
    return out


@attrs.frozen
class Encoder:
    """The :class:`~synapse_models.families.Family` of one of the three encoders."""

    name: str
    model_types: tuple[str, ...]
    cross_encoders: tuple[str, ...]
    prefixes: tuple[str, ...]
    #: positions start after the padding index's row (XLM-R, MPNet)
    offset_positions: bool
    #: MPNet: ``attn.q/k/v/o``, a relative position bias, no token types
    mpnet: bool = False
    word_embeddings: str = "embeddings.word_embeddings.weight"
    kept_float: tuple[tuple[int, str], ...] = ((0, "down"), (2, "up"))
    vocab_padded: bool = False

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        act = config.get("hidden_act", "gelu")
        if act != "gelu":
            raise ModelFilesError(source, f"hidden_act {act!r} is not supported; supported: gelu")
        kind = config.get("position_embedding_type", "absolute")
        if kind != "absolute":
            raise ModelFilesError(
                source, f"position_embedding_type {kind!r} is not supported; supported: absolute"
            )
        try:
            hidden = int(config["hidden_size"])
            table = int(config["max_position_embeddings"])
            pad = config.get("pad_token_id")
            offset = int(1 if pad is None else pad) + 1 if self.offset_positions else 0
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"missing or bad {exc}") from None
        return Sizes(hidden, table - offset, offset)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> EncoderBody:
        c = encoder_config(config, tensors.source)
        get, linear = tensors.get, tensors.linear
        layers = []
        for i in range(c.layers):
            p = f"encoder.layer.{i}."
            if self.mpnet:
                names = [p + f"attention.attn.{n}" for n in ("q", "k", "v")]
                out, ln1 = p + "attention.attn.o", p + "attention.LayerNorm"
            else:
                names = [p + f"attention.self.{n}" for n in ("query", "key", "value")]
                out, ln1 = p + "attention.output.dense", p + "attention.output.LayerNorm"
            q, k, v = (linear(n) for n in names)
            out_w, out_b = linear(out)
            up_w, up_b = linear(p + "intermediate.dense")
            down_w, down_b = linear(p + "output.dense")
            layers.append(
                Layer(
                    qkv_w=np.ascontiguousarray(np.concatenate([q[0], k[0], v[0]], axis=1)),
                    qkv_b=np.concatenate([q[1], k[1], v[1]]),
                    out_w=out_w,
                    out_b=out_b,
                    ln1_g=get(ln1 + ".weight"),
                    ln1_b=get(ln1 + ".bias"),
                    up_w=up_w,
                    up_b=up_b,
                    down_w=down_w,
                    down_b=down_b,
                    ln2_g=get(p + "output.LayerNorm.weight"),
                    ln2_b=get(p + "output.LayerNorm.bias"),
                )
            )
        position = np.ascontiguousarray(
            get("embeddings.position_embeddings.weight")[sizes.offset :]
        )
        relative = None
        if self.mpnet:
            weight = get("encoder.relative_attention_bias.weight")
            relative = RelativeBias(relative_buckets(len(position), len(weight)), weight)
        body = EncoderBody(
            config=c,
            word=get("embeddings.word_embeddings.weight"),
            position=position,
            token_type=None if self.mpnet else get("embeddings.token_type_embeddings.weight"),
            ln_g=get("embeddings.LayerNorm.weight"),
            ln_b=get("embeddings.LayerNorm.bias"),
            layers=tuple(layers),
            relative=relative,
        )
        if body.word.shape[1] != c.hidden:
            raise ModelFilesError(
                tensors.source, "the word embeddings do not match config.json's hidden_size"
            )
        return body

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        if self.name == "bert":
            dense_w, dense_b = tensors.linear("pooler.dense")
            out_w, out_b = tensors.linear("classifier")
        else:
            dense_w, dense_b = tensors.linear("classifier.dense")
            out_w, out_b = tensors.linear("classifier.out_proj")
        return Classifier(dense_w, dense_b, "tanh", out_w, out_b)

    def token_types(self, body: EncoderBody) -> bool:
        return body.token_type is not None

    def hidden_states(self, body: EncoderBody, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, head = c.heads, c.hidden // c.heads
        x = body.word[ids] + body.position[:width]
        if body.token_type is not None:
            x += body.token_type[types]
        x = layer_norm(x.reshape(rows * width, c.hidden), body.ln_g, body.ln_b, c.eps)
        bias = key_bias(mask)
        relative = None if body.relative is None else body.relative.for_width(width)
        scale = np.float32(1.0 / np.sqrt(head))
        for layer in body.layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(rows, width, 3, heads, head)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            scores = q @ k
            scores *= scale
            if relative is not None:
                scores += relative
            scores += bias
            softmax_(scores)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
            x = layer_end(x, context, layer, c.eps)
        out: F32 = x.reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: EncoderBody) -> str:
        c = body.config
        head = c.hidden // c.heads
        # Embeddings: word + position[:width] (+ token type), then a layer norm.
        width = g.width()
        positions = g.op("Slice", g.const(body.position), g.i64(0), width, g.i64(0))
        x = g.op("Add", g.op("Gather", g.const(body.word), "input_ids", axis=0), positions)
        if body.token_type is not None:
            x = g.op("Add", x, g.op("Gather", g.const(body.token_type), "token_type_ids", axis=0))
        x = g.layer_norm(x, body.ln_g, body.ln_b, c.eps)
        bias = g.key_bias()
        if body.relative is not None:
            # MPNet: weight[buckets[:width, :width]] as (1, heads, width, width), for every layer.
            stops = g.op("Concat", width, width, axis=0)
            window = g.op("Slice", g.const(body.relative.buckets), g.i64(0, 0), stops, g.i64(0, 1))
            relative = g.op("Gather", g.const(body.relative.weight), window, axis=0)
            relative = g.op("Unsqueeze", g.op("Transpose", relative, perm=[2, 0, 1]), g.i64(0))
            bias = g.op("Add", relative, bias)
        split_heads = g.i64(0, 0, c.heads, head)
        merge_heads = g.i64(0, 0, c.hidden)
        scale = g.f32(1.0 / float(np.sqrt(head)))
        for layer in body.layers:
            q, k, v = heads_graph(g, x, layer, c.hidden, split_heads, key_perm=(0, 2, 3, 1))
            scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), bias)
            probs = g.op("Softmax", scores, axis=-1)
            x = layer_end_graph(g, x, probs, v, merge_heads, layer, c.eps)
        return x


BERT = Encoder("bert", ("bert",), ("BertForSequenceClassification",), ("bert.",), False)
XLM_ROBERTA = Encoder(
    "xlm-roberta",
    ("xlm-roberta",),
    ("XLMRobertaForSequenceClassification",),
    ("roberta.",),
    True,
)
MPNET = Encoder("mpnet", ("mpnet",), (), ("mpnet.",), True, mpnet=True)
