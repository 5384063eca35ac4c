"""ModernBERT: a pre-norm encoder with rotary positions, alternating global
and local (sliding-window) attention, and a GeGLU feed-forward block.

As transformers' ``ModernBertModel`` computes it (and TEI's ``modernbert.rs``
reads the checkpoint):

- embeddings: ``embeddings.tok_embeddings`` then the LayerNorm
  ``embeddings.norm``; no positions, no token types;
- each layer ``layers.N``: ``x + Wo(attention(attn_norm(x)))`` (layer 0 has no
  ``attn_norm``: the embeddings' norm stands for it), then
  ``x + mlp.Wo(gelu(input) * gate)`` with ``input, gate`` the two halves of
  ``mlp.Wi(mlp_norm(x))``, in that order;
- attention: ``attn.Wqkv`` gives query, key and value side by side; rotary
  embeddings (rotate-half) on query and key, with ``global_rope_theta`` on a
  global layer and ``local_rope_theta`` on a local one; layer ``i`` is global
  when ``i % global_attn_every_n_layers == 0`` (or as ``layer_types`` says);
  a local layer's query ``i`` sees key ``j`` only when
  ``|i - j| <= local_attention // 2``, on top of the padding mask;
- ``final_norm`` last. Norms and products have biases only where
  ``norm_bias``, ``attention_bias`` and ``mlp_bias`` say (all false on the hub).

A cross-encoder (``ModernBertForSequenceClassification``) puts ``model.``
before those names and reads the CLS token or the masked mean
(``classifier_pooling``), then ``head.dense`` (bias per ``classifier_bias``),
``classifier_activation``, the LayerNorm ``head.norm`` and ``classifier``.

The vocabulary is padded past the tokenizer's (50368 rows for 50285
tokens): :attr:`ModernBert.vocab_padded`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Activation, Classifier
from ..numerics import MASKED, gelu, key_bias, layer_norm, softmax_
from ..weights import F32, I64, Tensors
from .protocol import Sizes

GLOBAL, LOCAL = "full_attention", "sliding_attention"
#: transformers' defaults when a config names no theta
DEFAULT_THETA = {GLOBAL: 160_000.0, LOCAL: 10_000.0}
#: ``classifier_activation`` values, by what :class:`~synapse_models.heads.Classifier` calls them
_HEAD_ACTIVATIONS: dict[str, Activation] = {"gelu": "gelu", "tanh": "tanh", "linear": "identity"}


@attrs.frozen
class ModernBertConfig:
    """The sizes and attention pattern of a ModernBERT encoder, from ``config.json``."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    #: each layer's attention: ``full_attention`` (global) or ``sliding_attention`` (local)
    layer_types: tuple[str, ...]
    #: a local layer's query sees keys at most this many positions away
    window: int
    global_theta: float
    local_theta: float
    norm_bias: bool
    attention_bias: bool
    mlp_bias: bool

    @property
    def head(self) -> int:
        return self.hidden // self.heads


@attrs.frozen
class Layer:
    """One layer's weights, matrices as (in, out); ``None``: no such norm or bias."""

    attn_norm_g: F32 | None  # layer 0 has none
    attn_norm_b: F32 | None
    qkv_w: F32  # (hidden, 3 * hidden): query, key, value side by side
    qkv_b: F32 | None
    out_w: F32
    out_b: F32 | None
    mlp_norm_g: F32
    mlp_norm_b: F32 | None
    up_w: F32  # (hidden, 2 * intermediate): the input half, then the gate half
    up_b: F32 | None
    down_w: F32
    down_b: F32 | None
    local: bool


@attrs.frozen
class Rotary:
    """Rotary tables for positions ``0 .. positions - 1``: (positions, head) each,
    the frequencies repeated over the two halves (rotate-half)."""

    cos: F32
    sin: F32


@attrs.frozen
class ModernBertBody:
    """A ModernBERT encoder's arranged weights."""

    config: ModernBertConfig
    word: F32
    norm_g: F32
    norm_b: F32 | None
    layers: tuple[Layer, ...]
    final_g: F32
    final_b: F32 | None
    rotary_global: Rotary
    rotary_local: Rotary


def _flag(config: Mapping[str, Any], key: str, source: str) -> bool:
    value = config.get(key, False)
    if not isinstance(value, bool):
        raise ModelFilesError(source, f"{key} {value!r} is not true or false")
    return value


def _layer_types(config: Mapping[str, Any], layers: int, source: str) -> tuple[str, ...]:
    """``layer_types`` (transformers 5), else every ``global_attn_every_n_layers``-th
    layer global from layer 0 (the hub's configs)."""
    named = config.get("layer_types")
    if named is not None:
        if (
            not isinstance(named, list)
            or len(named) != layers
            or any(t not in (GLOBAL, LOCAL) for t in named)
        ):
            raise ModelFilesError(
                source,
                f"layer_types {named!r} is not supported; supported: one of "
                f"{GLOBAL!r} or {LOCAL!r} per layer",
            )
        return tuple(named)
    every = config.get("global_attn_every_n_layers", 3)
    if not isinstance(every, int) or isinstance(every, bool) or every < 1:
        raise ModelFilesError(source, f"global_attn_every_n_layers {every!r} is not a count")
    return tuple(LOCAL if i % every else GLOBAL for i in range(layers))


def _thetas(config: Mapping[str, Any], source: str) -> tuple[float, float]:
    """The global and local rotary bases: ``rope_parameters`` (transformers 5)
    or ``global_rope_theta`` / ``local_rope_theta`` (the hub's configs)."""
    if config.get("rope_scaling") is not None:
        raise ModelFilesError(
            source, "rope_scaling is not supported; supported: plain rotary embeddings"
        )
    legacy = {GLOBAL: "global_rope_theta", LOCAL: "local_rope_theta"}
    parameters = config.get("rope_parameters") or {}
    if not isinstance(parameters, dict):
        raise ModelFilesError(source, f"rope_parameters {parameters!r} is not a mapping")
    thetas = []
    for kind in (GLOBAL, LOCAL):
        given = parameters.get(kind) or {}
        rope_type = given.get("rope_type", "default") if isinstance(given, dict) else None
        if rope_type != "default":
            raise ModelFilesError(
                source,
                f"rope_parameters {kind} {given!r} is not supported; supported: "
                "rope_type 'default'",
            )
        theta = given.get("rope_theta", config.get(legacy[kind], DEFAULT_THETA[kind]))
        try:
            thetas.append(float(theta))
        except (TypeError, ValueError):
            raise ModelFilesError(source, f"rotary theta {theta!r} is not a number") from None
    return thetas[0], thetas[1]


def modernbert_config(data: Mapping[str, Any], source: str) -> ModernBertConfig:
    act = data.get("hidden_activation", "gelu")
    if act != "gelu":
        raise ModelFilesError(
            source, f"hidden_activation {act!r} is not supported; supported: gelu"
        )
    try:
        hidden = int(data["hidden_size"])
        heads = int(data["num_attention_heads"])
        layers = int(data["num_hidden_layers"])
        intermediate = int(data["intermediate_size"])
        eps = float(data.get("norm_eps", 1e-5))
        local_attention = int(data.get("local_attention", 128))
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(source, f"not a ModernBERT config: missing or bad {exc}") from None
    if hidden % heads or (hidden // heads) % 2:
        raise ModelFilesError(
            source,
            "hidden_size is not an even multiple of num_attention_heads "
            "(rotary embeddings rotate pairs of a head's dimensions)",
        )
    global_theta, local_theta = _thetas(data, source)
    return ModernBertConfig(
        hidden=hidden,
        heads=heads,
        layers=layers,
        intermediate=intermediate,
        eps=eps,
        layer_types=_layer_types(data, layers, source),
        window=local_attention // 2,
        global_theta=global_theta,
        local_theta=local_theta,
        norm_bias=_flag(data, "norm_bias", source),
        attention_bias=_flag(data, "attention_bias", source),
        mlp_bias=_flag(data, "mlp_bias", source),
    )


def rotary(positions: int, head: int, theta: float) -> Rotary:
    """cos and sin of ``position * theta ** (-2k / head)``, in float32 as
    transformers computes them (the angles' rounding matters at long positions)."""
    exponents = np.arange(0, head, 2, dtype=np.int64).astype(np.float32) / np.float32(head)
    inverse = (np.float32(1.0) / np.power(np.float32(theta), exponents)).astype(np.float32)
    angles = np.arange(positions, dtype=np.float32)[:, None] * inverse[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    return Rotary(np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))


def window_bias(width: int, window: int) -> F32:
    """(1, 1, width, width): what a local layer adds for keys beyond the window."""
    steps = np.arange(width)
    outside = np.abs(steps[:, None] - steps[None, :]) > window
    out: F32 = np.where(outside, MASKED, np.float32(0.0)).astype(np.float32)[None, None]
    return out


def _rotate(x: F32, cos: F32, sin: F32) -> F32:
    """Rotate-half rotary of ``x`` (rows, width, heads, head) by (width, 1, head) tables."""
    half = x.shape[-1] // 2
    turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    turned *= sin
    out: F32 = x * cos
    out += turned
    return out


def _plus(x: npt.NDArray[Any], b: F32 | None) -> F32:
    """``x + b``, in place; ``b`` ``None``: no bias."""
    if b is not None:
        x += b
    out: F32 = x
    return out


class ModernBert:
    """The :class:`~synapse_models.families.Family` of ModernBERT."""

    name: str = "modernbert"
    model_types: tuple[str, ...] = ("modernbert",)
    cross_encoders: tuple[str, ...] = ("ModernBertForSequenceClassification",)
    prefixes: tuple[str, ...] = ("model.",)
    word_embeddings: str = "embeddings.tok_embeddings.weight"
    # The MiniLM-measured pair: the shared rule (quantize.kept_float) finds a
    # layer's up-projection as the product just before its narrowing one,
    # which here is the fused GeGLU ``mlp.Wi`` (one MatMul, split after it),
    # and its down-projection ``mlp.Wo``.
    kept_float: tuple[tuple[int, str], ...] = ((0, "down"), (2, "up"))
    vocab_padded: bool = True
    #: a byte-level tokenizer keeps a text's surrounding spaces as tokens,
    #: and sentence-transformers embeds the text as given
    strips_texts: bool = False

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        c = modernbert_config(config, source)
        try:
            positions = int(config["max_position_embeddings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"missing or bad {exc}") from None
        return Sizes(c.hidden, positions, 0)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> ModernBertBody:
        c = modernbert_config(config, tensors.source)
        get, matrix = tensors.get, tensors.matrix

        def norm(name: str) -> tuple[F32, F32 | None]:
            return get(name + ".weight"), get(name + ".bias") if c.norm_bias else None

        def linear(name: str, bias: bool) -> tuple[F32, F32 | None]:
            return matrix(name + ".weight"), get(name + ".bias") if bias else None

        layers = []
        for i in range(c.layers):
            p = f"layers.{i}."
            attn_norm = norm(p + "attn_norm") if i else (None, None)
            qkv_w, qkv_b = linear(p + "attn.Wqkv", c.attention_bias)
            out_w, out_b = linear(p + "attn.Wo", c.attention_bias)
            mlp_g, mlp_b = norm(p + "mlp_norm")
            up_w, up_b = linear(p + "mlp.Wi", c.mlp_bias)
            down_w, down_b = linear(p + "mlp.Wo", c.mlp_bias)
            if qkv_w.shape != (c.hidden, 3 * c.hidden) or up_w.shape != (
                c.hidden,
                2 * c.intermediate,
            ):
                raise ModelFilesError(
                    tensors.source,
                    f"layer {i}'s attn.Wqkv or mlp.Wi does not match config.json's "
                    "hidden_size and intermediate_size",
                )
            layers.append(
                Layer(
                    attn_norm_g=attn_norm[0],
                    attn_norm_b=attn_norm[1],
                    qkv_w=qkv_w,
                    qkv_b=qkv_b,
                    out_w=out_w,
                    out_b=out_b,
                    mlp_norm_g=mlp_g,
                    mlp_norm_b=mlp_b,
                    up_w=up_w,
                    up_b=up_b,
                    down_w=down_w,
                    down_b=down_b,
                    local=c.layer_types[i] == LOCAL,
                )
            )
        word = get(self.word_embeddings)
        if word.shape[1] != c.hidden:
            raise ModelFilesError(
                tensors.source, "the word embeddings do not match config.json's hidden_size"
            )
        norm_g, norm_b = norm("embeddings.norm")
        final_g, final_b = norm("final_norm")
        return ModernBertBody(
            config=c,
            word=word,
            norm_g=norm_g,
            norm_b=norm_b,
            layers=tuple(layers),
            final_g=final_g,
            final_b=final_b,
            rotary_global=rotary(sizes.positions, c.head, c.global_theta),
            rotary_local=rotary(sizes.positions, c.head, c.local_theta),
        )

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        # What is refused here is config.json's, next to the weights.
        source = str(Path(tensors.source).with_name("config.json"))
        pooling = config.get("classifier_pooling", "cls")
        if pooling not in ("cls", "mean"):
            raise ModelFilesError(
                source, f"classifier_pooling {pooling!r} is not supported; supported: cls, mean"
            )
        name = config.get("classifier_activation", "gelu")
        activation = _HEAD_ACTIVATIONS.get(name) if isinstance(name, str) else None
        if activation is None:
            raise ModelFilesError(
                source,
                f"classifier_activation {name!r} is not supported; supported: "
                f"{', '.join(_HEAD_ACTIVATIONS)}",
            )
        dense_w = tensors.matrix("head.dense.weight")
        dense_b = tensors.get("head.dense.bias") if config.get("classifier_bias") else None
        norm_b = tensors.get("head.norm.bias") if config.get("norm_bias") else None
        out_w, out_b = tensors.linear("classifier")
        pooled: Literal["cls", "mean"] = "mean" if pooling == "mean" else "cls"
        return Classifier(
            dense_w,
            dense_b,
            activation,
            out_w,
            out_b,
            pooling=pooled,
            norm_g=tensors.get("head.norm.weight"),
            norm_b=norm_b,
            norm_eps=float(config.get("norm_eps", 1e-5)),
        )

    def token_types(self, body: ModernBertBody) -> bool:
        return False

    def hidden_states(self, body: ModernBertBody, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, head = c.heads, c.head
        x = layer_norm(
            body.word[ids].reshape(rows * width, c.hidden), body.norm_g, body.norm_b, c.eps
        )
        padding = key_bias(mask)
        # Both masks are 0 or the float32 minimum: their minimum, not their sum, never overflows.
        local_bias = np.minimum(padding, window_bias(width, c.window))
        tables = {
            False: (body.rotary_global.cos[:width, None], body.rotary_global.sin[:width, None]),
            True: (body.rotary_local.cos[:width, None], body.rotary_local.sin[:width, None]),
        }
        scale = np.float32(1.0 / np.sqrt(head))
        for layer in body.layers:
            h = (
                x
                if layer.attn_norm_g is None
                else layer_norm(x, layer.attn_norm_g, layer.attn_norm_b, c.eps)
            )
            qkv = _plus(h @ layer.qkv_w, layer.qkv_b).reshape(rows, width, 3, heads, head)
            cos, sin = tables[layer.local]
            q = _rotate(qkv[:, :, 0], cos, sin).transpose(0, 2, 1, 3)
            k = _rotate(qkv[:, :, 1], cos, sin).transpose(0, 2, 3, 1)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            scores = q @ k
            scores *= scale
            scores += local_bias if layer.local else padding
            softmax_(scores)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
            x += _plus(context @ layer.out_w, layer.out_b)
            h = layer_norm(x, layer.mlp_norm_g, layer.mlp_norm_b, c.eps)
            up = _plus(h @ layer.up_w, layer.up_b)
            gated = gelu(up[:, : c.intermediate]) * up[:, c.intermediate :]
            x += _plus(gated @ layer.down_w, layer.down_b)
        out: F32 = layer_norm(x, body.final_g, body.final_b, c.eps).reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: ModernBertBody) -> str:
        c = body.config
        head, half = c.head, c.head // 2
        width = g.width()
        x = g.op("Gather", g.const(body.word), "input_ids", axis=0)
        x = g.layer_norm(x, body.norm_g, body.norm_b, c.eps)
        padding = g.key_bias()
        # A local layer's window: |i - j| > window gets the float32 minimum, as in numpy.
        steps = g.op("Range", g.i64(0), g.op("Squeeze", width, g.i64(0)), g.i64(1))
        distance = g.op(
            "Abs",
            g.op("Sub", g.op("Unsqueeze", steps, g.i64(1)), g.op("Unsqueeze", steps, g.i64(0))),
        )
        outside = g.op("Greater", distance, g.const(np.array(c.window, dtype=np.int64)))
        window = g.op("Where", outside, g.f32(float(MASKED)), g.f32(0.0))
        local_bias = g.op("Min", padding, window)

        def tables(r: Rotary) -> tuple[str, str]:
            """(width, 1, head) cos and sin."""
            cos, sin = (
                g.op("Unsqueeze", g.op("Slice", g.const(t), g.i64(0), width, g.i64(0)), g.i64(1))
                for t in (r.cos, r.sin)
            )
            return cos, sin

        rotary = {False: tables(body.rotary_global), True: tables(body.rotary_local)}
        split_heads = g.i64(0, 0, c.heads, head)
        merge_heads = g.i64(0, 0, c.hidden)
        halves = g.i64(half, half)
        scale = g.f32(1.0 / float(np.sqrt(head)))

        def rotate(part: str, cos: str, sin: str) -> str:
            first, second = g.ops("Split", [part, halves], 2, axis=-1)
            turned = g.op("Concat", g.op("Neg", second), first, axis=-1)
            return g.op("Add", g.op("Mul", part, cos), g.op("Mul", turned, sin))

        for layer in body.layers:
            h = (
                x
                if layer.attn_norm_g is None
                else g.layer_norm(x, layer.attn_norm_g, layer.attn_norm_b, c.eps)
            )
            qkv = g.linear(h, layer.qkv_w, layer.qkv_b)
            parts = g.ops("Split", [qkv, g.i64(c.hidden, c.hidden, c.hidden)], 3, axis=-1)
            q, k, v = (g.op("Reshape", part, split_heads) for part in parts)
            cos, sin = rotary[layer.local]
            q = g.op("Transpose", rotate(q, cos, sin), perm=[0, 2, 1, 3])
            k = g.op("Transpose", rotate(k, cos, sin), perm=[0, 2, 3, 1])
            v = g.op("Transpose", v, perm=[0, 2, 1, 3])
            bias = local_bias if layer.local else padding
            scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), bias)
            probs = g.op("Softmax", scores, axis=-1)
            context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
            context = g.op("Reshape", context, merge_heads)
            x = g.op("Add", x, g.linear(context, layer.out_w, layer.out_b))
            h = g.layer_norm(x, layer.mlp_norm_g, layer.mlp_norm_b, c.eps)
            # One product for both halves (int8's kept_float finds it as the up-projection).
            up = g.linear(h, layer.up_w, layer.up_b)
            gate_in, gate = g.ops("Split", [up, g.i64(c.intermediate, c.intermediate)], 2, axis=-1)
            gated = g.op("Mul", g.gelu(gate_in), gate)
            x = g.op("Add", x, g.linear(gated, layer.down_w, layer.down_b))
        return g.layer_norm(x, body.final_g, body.final_b, c.eps)


MODERNBERT = ModernBert()
