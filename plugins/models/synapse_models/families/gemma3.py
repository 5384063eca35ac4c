"""Gemma 3 as a bidirectional encoder (``gemma3_text`` with
``use_bidirectional_attention``): google/embeddinggemma-300m.

The body is transformers' ``Gemma3TextModel`` with its causal mask lifted:

- the word embeddings are scaled by ``sqrt(hidden_size)`` (in float32, as
  transformers multiplies by ``embed_scale`` in the weights' dtype);
- every RMSNorm's weight is stored as ``w`` in ``x / rms(x) * (1 + w)``;
- each layer: ``input_layernorm``, attention, ``post_attention_layernorm``,
  residual; ``pre_feedforward_layernorm``, a GELU-gated feed-forward block
  (``down(gelu_tanh(gate x) * up x)``), ``post_feedforward_layernorm``,
  residual; then a final ``norm``;
- attention is grouped-query (``num_key_value_heads``) with ``head_dim``,
  RMS-normed queries and keys (``q_norm``, ``k_norm``) before rotary
  (rotate-half), scaled by ``query_pre_attn_scalar ** -0.5``;
- ``layer_types`` (or ``sliding_window_pattern``) makes a layer full or
  sliding: a sliding layer's position ``i`` sees ``j`` where
  ``|i - j| <= sliding_window // 2`` (transformers' bidirectional sliding
  mask; TEI's ``gemma3.rs`` likewise) and turns by ``rope_local_base_freq``,
  a full one by ``rope_theta``.

Tensor names are the hub's (``embed_tokens``, ``layers.N.self_attn.q_proj``,
..., ``norm``), without a prefix. What follows the body (mean pooling, the two
sentence-transformers Dense modules, Normalize) is shared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Classifier
from ..numerics import MASKED, gelu_tanh, rms_norm, rotary, rotate, softmax_
from ..weights import F32, I64, Tensors
from .protocol import Sizes

SLIDING, FULL = "sliding_attention", "full_attention"


@attrs.frozen
class GemmaConfig:
    """The sizes of a Gemma 3 body, from ``config.json``."""

    hidden: int
    heads: int
    kv_heads: int
    head: int
    layers: int
    intermediate: int
    eps: float
    #: ``query_pre_attn_scalar ** -0.5``
    scale: float
    #: per layer: sliding (local) attention, else full
    sliding: tuple[bool, ...]
    #: a sliding layer's positions see this many on each side
    window: int
    global_base: float
    local_base: float
    positions: int


@attrs.frozen
class GemmaLayer:
    """One layer's weights, matrices as (in, out); norms as ``1 + w``."""

    input_norm: F32
    #: (hidden, (heads + 2 * kv_heads) * head): queries, keys, values side by side
    qkv_w: F32
    q_norm: F32
    k_norm: F32
    out_w: F32
    post_attention_norm: F32
    pre_feedforward_norm: F32
    #: (hidden, 2 * intermediate): the gate then the up-projection
    up_w: F32
    down_w: F32
    post_feedforward_norm: F32
    sliding: bool


@attrs.frozen
class GemmaBody:
    """A Gemma 3 body's arranged weights."""

    config: GemmaConfig
    #: the word embeddings already multiplied by ``sqrt(hidden)``
    word: F32
    layers: tuple[GemmaLayer, ...]
    norm: F32
    #: rotary cosines and sines (positions, head) of full and of sliding layers
    global_cos: F32
    global_sin: F32
    local_cos: F32
    local_sin: F32


def _rope_bases(data: Mapping[str, Any], source: str) -> tuple[float, float]:
    """(full, sliding) rotary bases: transformers 5's ``rope_parameters`` by
    layer type, else the hub's ``rope_theta`` and ``rope_local_base_freq``."""
    parameters = data.get("rope_parameters")
    if isinstance(parameters, Mapping) and FULL in parameters:
        bases = []
        for kind in (FULL, SLIDING):
            entry = parameters.get(kind) or {}
            rope_type = entry.get("rope_type", "default")
            if rope_type != "default":
                raise ModelFilesError(
                    source,
                    f"rope_parameters {kind} rope_type {rope_type!r} is not supported; "
                    "supported: 'default'",
                )
            bases.append(float(entry["rope_theta"]))
        return bases[0], bases[1]
    scaling = data.get("rope_scaling")
    if scaling is not None:
        raise ModelFilesError(source, f"rope_scaling {scaling!r} is not supported; supported: null")
    return float(data.get("rope_theta", 1_000_000.0)), float(
        data.get("rope_local_base_freq", 10_000.0)
    )


def gemma_config(data: Mapping[str, Any], source: str) -> GemmaConfig:
    """Read and check ``config.json``: :class:`ModelFilesError` names what is not supported."""
    refused = {
        "use_bidirectional_attention": (data.get("use_bidirectional_attention", False), True),
        "hidden_activation": (
            data.get("hidden_activation", data.get("hidden_act", "gelu_pytorch_tanh")),
            "gelu_pytorch_tanh",
        ),
        "attention_bias": (data.get("attention_bias", False), False),
        "attn_logit_softcapping": (data.get("attn_logit_softcapping"), None),
    }
    for key, (value, supported) in refused.items():
        if value != supported:
            raise ModelFilesError(
                source, f"{key} {value!r} is not supported; supported: {supported!r}"
            )
    try:
        layers = int(data["num_hidden_layers"])
        types = data.get("layer_types")
        if types is None:
            pattern = int(
                data.get("sliding_window_pattern", data.get("_sliding_window_pattern", 6))
            )
            types = [SLIDING if (i + 1) % pattern else FULL for i in range(layers)]
        if len(types) != layers or not set(types) <= {SLIDING, FULL}:
            raise ModelFilesError(
                source,
                f"layer_types {types!r} is not supported; supported: one of "
                f"{SLIDING!r} or {FULL!r} per layer",
            )
        heads = int(data["num_attention_heads"])
        head = int(data.get("head_dim") or int(data["hidden_size"]) // heads)
        global_base, local_base = _rope_bases(data, source)
        window = data.get("sliding_window")
        config = GemmaConfig(
            hidden=int(data["hidden_size"]),
            heads=heads,
            kv_heads=int(data.get("num_key_value_heads", heads)),
            head=head,
            layers=layers,
            intermediate=int(data["intermediate_size"]),
            eps=float(data.get("rms_norm_eps", 1e-6)),
            scale=float(data.get("query_pre_attn_scalar", head)) ** -0.5,
            sliding=tuple(t == SLIDING for t in types),
            window=int(window) // 2 if window is not None else 0,
            global_base=global_base,
            local_base=local_base,
            positions=int(data["max_position_embeddings"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(source, f"not a Gemma 3 config: missing or bad {exc}") from None
    if config.heads % config.kv_heads or config.head % 2:
        raise ModelFilesError(
            source,
            "num_attention_heads is not a multiple of num_key_value_heads, or head_dim is odd",
        )
    if any(config.sliding) and config.window < 1:
        raise ModelFilesError(source, "sliding layers need a sliding_window of 2 or more")
    return config


def _with_one(weight: F32) -> F32:
    """A Gemma RMSNorm's scale: ``1 + w`` (in float32, as transformers computes it)."""
    out: F32 = weight + np.float32(1.0)
    return out


@attrs.frozen
class Gemma3:
    """The :class:`~synapse_models.families.Family` of Gemma 3 bidirectional encoders."""

    name: str = "gemma3"
    model_types: tuple[str, ...] = ("gemma3_text",)
    cross_encoders: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    word_embeddings: str = "embed_tokens.weight"
    kept_float: tuple[tuple[int, str], ...] = ((0, "down"), (2, "up"))
    #: the hub's table has 262144 rows; a tokenizer may list fewer
    vocab_padded: bool = True
    #: surrounding spaces are tokens of Gemma's tokenizer, and
    #: sentence-transformers keeps them
    strips_texts: bool = False

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        c = gemma_config(config, source)
        return Sizes(c.hidden, c.positions)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> GemmaBody:
        c = gemma_config(config, tensors.source)
        get, matrix = tensors.get, tensors.matrix
        layers = []
        for i in range(c.layers):
            p = f"layers.{i}."
            a = p + "self_attn."
            # One product each for queries, keys and values, and for gate and up.
            qkv = [matrix(a + f"{n}_proj.weight") for n in ("q", "k", "v")]
            up = [matrix(p + f"mlp.{n}_proj.weight") for n in ("gate", "up")]
            layers.append(
                GemmaLayer(
                    input_norm=_with_one(get(p + "input_layernorm.weight")),
                    qkv_w=np.ascontiguousarray(np.concatenate(qkv, axis=1)),
                    q_norm=_with_one(get(a + "q_norm.weight")),
                    k_norm=_with_one(get(a + "k_norm.weight")),
                    out_w=matrix(a + "o_proj.weight"),
                    post_attention_norm=_with_one(get(p + "post_attention_layernorm.weight")),
                    pre_feedforward_norm=_with_one(get(p + "pre_feedforward_layernorm.weight")),
                    up_w=np.ascontiguousarray(np.concatenate(up, axis=1)),
                    down_w=matrix(p + "mlp.down_proj.weight"),
                    post_feedforward_norm=_with_one(get(p + "post_feedforward_layernorm.weight")),
                    sliding=c.sliding[i],
                )
            )
        word = get(self.word_embeddings)
        if (
            word.shape[1] != c.hidden
            or layers[0].qkv_w.shape[1] != (c.heads + 2 * c.kv_heads) * c.head
        ):
            raise ModelFilesError(
                tensors.source,
                "the weights do not match config.json's hidden_size, heads and head_dim",
            )
        # transformers multiplies each looked-up row by embed_scale in float32:
        # the same products, made once.
        scale = np.float32(np.sqrt(c.hidden))
        if word.flags.writeable:
            word *= scale
        else:
            word = word * scale
        global_cos, global_sin = rotary(c.positions, c.head, c.global_base)
        local_cos, local_sin = rotary(c.positions, c.head, c.local_base)
        return GemmaBody(
            config=c,
            word=word,
            layers=tuple(layers),
            norm=_with_one(get("norm.weight")),
            global_cos=global_cos,
            global_sin=global_sin,
            local_cos=local_cos,
            local_sin=local_sin,
        )

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        raise ModelFilesError(tensors.source, "Gemma 3 is served as an embedder only")

    def token_types(self, body: GemmaBody) -> bool:
        return False

    def hidden_states(self, body: GemmaBody, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, kv, head = c.heads, c.kv_heads, c.head
        group = heads // kv
        x = body.word[ids].reshape(rows * width, c.hidden)
        keys = mask[:, None, None, None, :] > 0  # (rows, 1, 1, 1, width)
        full = np.where(keys, np.float32(0.0), MASKED)
        steps = np.arange(width)
        near = np.abs(steps[:, None] - steps[None, :]) <= c.window
        # Min of two masks, never their sum: two float32 minima would make -inf.
        local = np.where(keys & near, np.float32(0.0), MASKED)
        tables = {
            False: (body.global_cos[:width], body.global_sin[:width]),
            True: (body.local_cos[:width], body.local_sin[:width]),
        }
        scale = np.float32(c.scale)
        q_width = heads * head
        for layer in body.layers:
            cos, sin = tables[layer.sliding]
            h = rms_norm(x, layer.input_norm, c.eps)
            qkv = h @ layer.qkv_w
            q = rms_norm(qkv[:, :q_width].reshape(rows, width, heads, head), layer.q_norm, c.eps)
            k = qkv[:, q_width : q_width + kv * head].reshape(rows, width, kv, head)
            k = rms_norm(k, layer.k_norm, c.eps)
            v = qkv[:, q_width + kv * head :].reshape(rows, width, kv, head)
            q = rotate(q.transpose(0, 2, 1, 3), cos, sin).reshape(rows, kv, group, width, head)
            k = rotate(k.transpose(0, 2, 1, 3), cos, sin)[:, :, None]
            scores = q @ k.transpose(0, 1, 2, 4, 3)  # (rows, kv, group, width, width)
            scores *= scale
            scores += local if layer.sliding else full
            softmax_(scores)
            context = scores @ v.transpose(0, 2, 1, 3)[:, :, None]
            context = context.reshape(rows, heads, width, head).transpose(0, 2, 1, 3)
            attended = context.reshape(rows * width, q_width) @ layer.out_w
            x = x + rms_norm(attended, layer.post_attention_norm, c.eps)
            h = rms_norm(x, layer.pre_feedforward_norm, c.eps)
            up = h @ layer.up_w
            gated = gelu_tanh(up[:, : c.intermediate]) * up[:, c.intermediate :]
            x = x + rms_norm(gated @ layer.down_w, layer.post_feedforward_norm, c.eps)
        out: F32 = rms_norm(x, body.norm, c.eps).reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: GemmaBody) -> str:
        c = body.config
        heads, kv, head = c.heads, c.kv_heads, c.head
        group, q_width, kv_width = heads // kv, heads * head, kv * head
        width = g.width()

        def window(table: Any) -> str:
            return g.op("Slice", g.const(table), g.i64(0), width, g.i64(0))

        tables = {
            False: (window(body.global_cos), window(body.global_sin)),
            True: (window(body.local_cos), window(body.local_sin)),
        }
        x = g.op("Gather", g.const(body.word), "input_ids", axis=0)
        # Masks as (rows, 1, 1, 1, width) and (rows, 1, 1, width, width), for
        # scores (rows, kv heads, group, width, width).
        keys = g.op("Unsqueeze", g.op("Greater", "attention_mask", g.f32(0.0)), g.i64(1, 2, 3))
        zero, masked = g.f32(0.0), g.f32(float(MASKED))
        full = g.op("Where", keys, zero, masked)
        steps = window(np.arange(c.positions, dtype=np.int64))
        apart = g.op(
            "Abs",
            g.op("Sub", g.op("Unsqueeze", steps, g.i64(1)), g.op("Unsqueeze", steps, g.i64(0))),
        )
        near = g.op("LessOrEqual", apart, g.i64(c.window))
        local = g.op("Where", g.op("And", keys, near), zero, masked)
        scale = g.f32(c.scale)
        split_q = g.i64(0, 0, heads, head)
        split_kv = g.i64(0, 0, kv, head)
        grouped = g.i64(0, kv, group, -1, head)
        merged = g.i64(0, heads, -1, head)
        merge_heads = g.i64(0, 0, q_width)
        for layer in body.layers:
            cos, sin = tables[layer.sliding]
            h = g.rms_norm(x, layer.input_norm, c.eps)
            qkv = g.matmul(h, layer.qkv_w)
            q, k, v = g.ops("Split", [qkv, g.i64(q_width, kv_width, kv_width)], 3, axis=-1)
            q = g.rms_norm(g.op("Reshape", q, split_q), layer.q_norm, c.eps)
            k = g.rms_norm(g.op("Reshape", k, split_kv), layer.k_norm, c.eps)
            q = g.rotate(g.op("Transpose", q, perm=[0, 2, 1, 3]), cos, sin, head)
            k = g.rotate(g.op("Transpose", k, perm=[0, 2, 1, 3]), cos, sin, head)
            v = g.op("Transpose", g.op("Reshape", v, split_kv), perm=[0, 2, 1, 3])
            q = g.op("Reshape", q, grouped)
            k = g.op("Unsqueeze", g.op("Transpose", k, perm=[0, 1, 3, 2]), g.i64(2))
            v = g.op("Unsqueeze", v, g.i64(2))
            scores = g.op("Mul", g.op("MatMul", q, k), scale)
            scores = g.op("Add", scores, local if layer.sliding else full)
            probs = g.op("Softmax", scores, axis=-1)
            context = g.op("Reshape", g.op("MatMul", probs, v), merged)
            context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
            attended = g.rms_norm(g.matmul(context, layer.out_w), layer.post_attention_norm, c.eps)
            x = g.op("Add", x, attended)
            h = g.rms_norm(x, layer.pre_feedforward_norm, c.eps)
            gate, up = g.ops(
                "Split",
                [g.matmul(h, layer.up_w), g.i64(c.intermediate, c.intermediate)],
                2,
                axis=-1,
            )
            down = g.matmul(g.op("Mul", g.gelu_tanh(gate), up), layer.down_w)
            x = g.op("Add", x, g.rms_norm(down, layer.post_feedforward_norm, c.eps))
        return g.rms_norm(x, body.norm, c.eps)


GEMMA3 = Gemma3()
