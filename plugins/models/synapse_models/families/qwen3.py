"""Qwen3: a decoder (causal attention) with RMSNorm, rotary positions,
grouped-query attention, a per-head RMSNorm of queries and keys, and a
SwiGLU feed-forward block. Served two ways, both from ``Qwen3ForCausalLM``
folders:

- **Qwen3-Embedding** (a sentence-transformers folder: ``modules.json``,
  last-token pooling, Normalize, an instruction prompt ``query``): tensors
  without a prefix (``embed_tokens``, ``layers.N.*``, ``norm``). Its
  tokenizer appends ``<|endoftext|>`` and adds no start token.
- **Qwen3-Reranker** (no sentence-transformers modules: an LLM reranker):
  tensors under ``model.``, and ``lm_head`` or, tied, the embedding table.
  A pair is scored in the model card's prompt (:data:`RERANK_PROMPT`): the
  score is ``logit("yes") - logit("no")`` at the last position (the host's
  sigmoid of it is the card's ``softmax([no, yes])[yes]``).

The math is transformers' ``modeling_qwen3`` (and TEI's ``qwen3.rs``):
``x = embed[ids]``; per layer ``x += o(attn(rope(q_norm(q)), rope(k_norm(k)), v))``
on ``input_layernorm(x)``, then ``x += down(silu(gate(h)) * up(h))`` on
``post_attention_layernorm(x)``; the final ``norm``. RMSNorm is
``x / sqrt(mean(x^2) + eps) * w``; rotary is ``rotate_half`` with
``inv_freq = theta^(-2i/head_dim)``; query head ``h`` reads key/value head
``h // (heads / kv_heads)``.

Rows are right-padded (the reference pads left, as the model card says):
with causal attention a real position never sees a later one, padding
included, and rotary positions are relative, so a right-padded row's real
positions equal the row alone, and its last real token (``lasttoken``) is
the one the left-padded reference reads at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Classifier
from ..numerics import MASKED, softmax_
from ..packing import PairTemplate
from ..weights import F32, I64, Tensors
from .protocol import Sizes

#: Qwen3-Reranker's prompt and default instruction, as its model card writes them
RERANK_PROMPT = PairTemplate(
    prefix=(
        "<|im_start|>system\nJudge whether the Document meets the requirements based on "
        'the Query and the Instruct provided. Note that the answer can only be "yes" or '
        '"no".<|im_end|>\n<|im_start|>user\n<Instruct>: {instruction}\n<Query>:'
    ),
    between="\n<Document>:",
    suffix="<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    lead=" ",
    instruction="Given a web search query, retrieve relevant passages that answer the query",
)


@attrs.frozen
class Qwen3Config:
    """The sizes of a Qwen3 decoder, from ``config.json``."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    intermediate: int
    eps: float
    theta: float
    bias: bool
    tied: bool


@attrs.frozen
class Layer:
    """One decoder layer's weights, matrices as (in, out)."""

    ln1: F32
    qkv_w: F32  # (hidden, (heads + 2 kv_heads) * head_dim): q, k, v side by side
    qkv_b: F32 | None
    q_norm: F32
    k_norm: F32
    o_w: F32
    o_b: F32 | None
    ln2: F32
    gate_up_w: F32  # (hidden, 2 * intermediate): gate, up side by side
    down_w: F32


@attrs.frozen
class Qwen3Body:
    """A Qwen3 decoder's arranged weights."""

    config: Qwen3Config
    word: F32
    layers: tuple[Layer, ...]
    norm: F32
    inv_freq: F32  # (head_dim / 2,)


def qwen3_config(data: Mapping[str, Any], source: str) -> Qwen3Config:
    """Checks ``config.json`` and reads its sizes; refuses what is not served."""
    act = data.get("hidden_act", "silu")
    if act != "silu":
        raise ModelFilesError(source, f"hidden_act {act!r} is not supported; supported: silu")
    if data.get("use_sliding_window"):
        raise ModelFilesError(
            source, "use_sliding_window true is not supported; supported: full causal attention"
        )
    rope = data.get("rope_parameters") or data.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else rope
    if kind != "default":
        raise ModelFilesError(
            source, f"rope scaling {kind!r} is not supported; supported: default rotary"
        )
    try:
        hidden, heads = int(data["hidden_size"]), int(data["num_attention_heads"])
        theta = data.get("rope_theta", rope.get("rope_theta", 10000.0))
        config = Qwen3Config(
            hidden=hidden,
            heads=heads,
            kv_heads=int(data.get("num_key_value_heads") or heads),
            head_dim=int(data.get("head_dim") or hidden // heads),
            layers=int(data["num_hidden_layers"]),
            intermediate=int(data["intermediate_size"]),
            eps=float(data.get("rms_norm_eps", 1e-6)),
            theta=float(theta),
            bias=bool(data.get("attention_bias", False)),
            tied=bool(data.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ModelFilesError(source, f"not a Qwen3 config: missing or bad {exc}") from None
    if config.heads % config.kv_heads or config.head_dim % 2:
        raise ModelFilesError(
            source,
            "num_attention_heads must be a multiple of num_key_value_heads and head_dim even",
        )
    return config


def rms_norm(x: F32, w: F32, eps: float) -> F32:
    """RMSNorm over the last axis, as transformers' ``Qwen3RMSNorm``."""
    variance = (x * x).mean(axis=-1, keepdims=True)
    out: F32 = x * (np.float32(1.0) / np.sqrt(variance + np.float32(eps))) * w
    return out


def silu(x: F32) -> F32:
    out: F32 = (x / (np.float32(1.0) + np.exp(-x))).astype(np.float32, copy=False)
    return out


def rotary(inv_freq: F32, width: int) -> tuple[F32, F32]:
    """cos and sin (width, 1, head_dim) of positions ``0 .. width - 1``."""
    freqs = np.arange(width, dtype=np.float32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]
    return np.cos(emb), np.sin(emb)


def rotate(x: F32, cos: F32, sin: F32) -> F32:
    """``x * cos + rotate_half(x) * sin`` over the last axis."""
    half = x.shape[-1] // 2
    turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    out: F32 = (x * cos + turned * sin).astype(np.float32, copy=False)
    return out


def attention_bias(mask: F32) -> F32:
    """(rows, 1, 1, width, width): 0 where query ``i`` may see key ``j`` (a
    real key, ``j <= i``), else the float32 minimum."""
    width = mask.shape[1]
    causal = np.tril(np.ones((width, width), dtype=bool))
    seen = (mask[:, None, :] > 0) & causal[None]
    out: F32 = np.where(seen, np.float32(0.0), MASKED).astype(np.float32)[:, None, None]
    return out


class Qwen3:
    """The :class:`~synapse_models.families.Family` of Qwen3 decoders."""

    name: str = "qwen3"
    model_types: tuple[str, ...] = ("qwen3",)
    cross_encoders: tuple[str, ...] = ()
    #: the reranker's checkpoint (a causal LM) puts its body under ``model.``
    prefixes: tuple[str, ...] = ("model.",)
    word_embeddings: str = "embed_tokens.weight"
    #: int8 keeps no product in float32: the encoders' rule for finding the
    #: feed-forward products does not apply here (the attention output
    #: narrows too when heads x head_dim > hidden)
    kept_float: tuple[tuple[int, str], ...] = ()
    #: Qwen checkpoints pad the embedding table past the tokenizer's tokens
    vocab_padded: bool = True

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        c = qwen3_config(config, source)
        try:
            positions = int(config["max_position_embeddings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"missing or bad {exc}") from None
        named = config.get("architectures") or []
        causal_lm = any(isinstance(a, str) and a.endswith("ForCausalLM") for a in named)
        template = None
        if causal_lm:
            # The language-model head: its own, or the tied embedding table.
            head = "embed_tokens.weight" if c.tied else "lm_head.weight"
            template = attrs.evolve(RERANK_PROMPT, logits=(head,))
        return Sizes(c.hidden, positions, 0, causal=True, template=template)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> Qwen3Body:
        c = qwen3_config(config, tensors.source)
        get, matrix = tensors.get, tensors.matrix
        layers = []
        for i in range(c.layers):
            p = f"layers.{i}."
            a = p + "self_attn."
            qkv = [matrix(a + f"{n}_proj.weight") for n in ("q", "k", "v")]
            qkv_b = None
            if c.bias:
                qkv_b = np.concatenate([get(a + f"{n}_proj.bias") for n in ("q", "k", "v")])
            layers.append(
                Layer(
                    ln1=get(p + "input_layernorm.weight"),
                    qkv_w=np.ascontiguousarray(np.concatenate(qkv, axis=1)),
                    qkv_b=qkv_b,
                    q_norm=get(a + "q_norm.weight"),
                    k_norm=get(a + "k_norm.weight"),
                    o_w=matrix(a + "o_proj.weight"),
                    o_b=get(a + "o_proj.bias") if tensors.has(a + "o_proj.bias") else None,
                    ln2=get(p + "post_attention_layernorm.weight"),
                    gate_up_w=np.ascontiguousarray(
                        np.concatenate(
                            [matrix(p + "mlp.gate_proj.weight"), matrix(p + "mlp.up_proj.weight")],
                            axis=1,
                        )
                    ),
                    down_w=matrix(p + "mlp.down_proj.weight"),
                )
            )
        # inv_freq in float32, as transformers computes it
        steps = np.arange(0, c.head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(
            c.head_dim
        )
        inv_freq = (np.float32(1.0) / (np.float32(c.theta) ** steps)).astype(np.float32)
        body = Qwen3Body(c, get(self.word_embeddings), tuple(layers), get("norm.weight"), inv_freq)
        q_width = c.heads * c.head_dim
        if body.word.shape[1] != c.hidden or body.layers[0].o_w.shape != (q_width, c.hidden):
            raise ModelFilesError(
                tensors.source,
                "the weights do not match config.json's hidden_size, num_attention_heads "
                "and head_dim",
            )
        return body

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        # No *ForSequenceClassification is served (cross_encoders is empty);
        # the LLM reranker's head is the shared yes/no head.
        raise ModelFilesError(
            tensors.source, "Qwen3 sequence-classification heads are not supported"
        )

    def token_types(self, body: Qwen3Body) -> bool:
        return False

    def hidden_states(self, body: Qwen3Body, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, kv, hd = c.heads, c.kv_heads, c.head_dim
        groups = heads // kv
        x = body.word[ids].reshape(rows * width, c.hidden)
        cos, sin = rotary(body.inv_freq, width)
        bias = attention_bias(mask)
        scale = np.float32(hd**-0.5)
        for layer in body.layers:
            h = rms_norm(x, layer.ln1, c.eps)
            qkv = h @ layer.qkv_w
            if layer.qkv_b is not None:
                qkv += layer.qkv_b
            q = qkv[:, : heads * hd].reshape(rows, width, heads, hd)
            k = qkv[:, heads * hd : (heads + kv) * hd].reshape(rows, width, kv, hd)
            v = qkv[:, (heads + kv) * hd :].reshape(rows, width, kv, hd)
            q = rotate(rms_norm(q, layer.q_norm, c.eps), cos, sin)
            k = rotate(rms_norm(k, layer.k_norm, c.eps), cos, sin)
            # Query head h reads key/value head h // groups: (rows, kv, groups, width, hd).
            q5 = q.reshape(rows, width, kv, groups, hd).transpose(0, 2, 3, 1, 4)
            k5 = k.transpose(0, 2, 3, 1)[:, :, None]  # (rows, kv, 1, hd, width)
            v5 = v.transpose(0, 2, 1, 3)[:, :, None]  # (rows, kv, 1, width, hd)
            scores = q5 @ k5
            scores *= scale
            scores += bias
            softmax_(scores)
            context = (scores @ v5).transpose(0, 3, 1, 2, 4).reshape(rows * width, heads * hd)
            attended = context @ layer.o_w
            if layer.o_b is not None:
                attended += layer.o_b
            x = x + attended
            h = rms_norm(x, layer.ln2, c.eps)
            gate_up = h @ layer.gate_up_w
            gate, up = gate_up[:, : c.intermediate], gate_up[:, c.intermediate :]
            x = (x + (silu(gate) * up) @ layer.down_w).astype(np.float32, copy=False)
        out: F32 = rms_norm(x, body.norm, c.eps).reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: Qwen3Body) -> str:
        c = body.config
        heads, kv, hd = c.heads, c.kv_heads, c.head_dim
        groups = heads // kv
        x = g.op("Gather", g.const(body.word), "input_ids", axis=0)
        # Positions 0 .. width - 1: rotary cos/sin (width, 1, hd) and the causal mask.
        width = g.op("Squeeze", g.width(), g.i64(0))
        steps = g.op("Range", g.const(np.array(0, np.int64)), width, g.const(np.array(1, np.int64)))
        positions = g.op("Cast", steps, to=1)
        freqs = g.op("Mul", g.op("Unsqueeze", positions, g.i64(1)), g.const(body.inv_freq))
        emb = g.op("Unsqueeze", g.op("Concat", freqs, freqs, axis=-1), g.i64(1))
        cos, sin = g.op("Cos", emb), g.op("Sin", emb)
        causal = g.op(
            "LessOrEqual",
            g.op("Unsqueeze", steps, g.i64(0)),  # key j
            g.op("Unsqueeze", steps, g.i64(1)),  # query i
        )
        real = g.op("Greater", g.op("Unsqueeze", "attention_mask", g.i64(1, 2, 3)), g.f32(0.0))
        bias = g.op("Where", g.op("And", real, causal), g.f32(0.0), g.f32(float(MASKED)))
        scale = g.f32(float(np.float32(hd**-0.5)))
        split_q = g.i64(0, 0, kv, groups, hd)
        split_kv = g.i64(0, 0, kv, hd)
        merge = g.i64(0, 0, heads * hd)
        sizes = g.i64(heads * hd, kv * hd, kv * hd)
        halves = g.i64(hd // 2, hd // 2)
        gate_up = g.i64(c.intermediate, c.intermediate)

        def norm(t: str, w: F32) -> str:
            variance = g.op("ReduceMean", g.op("Mul", t, t), axes=[-1], keepdims=1)
            root = g.op("Sqrt", g.op("Add", variance, g.f32(c.eps)))
            scaled = g.op("Mul", t, g.op("Div", g.f32(1.0), root))
            return g.op("Mul", scaled, g.const(w))

        def rope(t: str) -> str:
            first, second = g.ops("Split", [t, halves], 2, axis=-1)
            turned = g.op("Concat", g.op("Neg", second), first, axis=-1)
            return g.op("Add", g.op("Mul", t, cos), g.op("Mul", turned, sin))

        for layer in body.layers:
            h = norm(x, layer.ln1)
            qkv = g.linear(h, layer.qkv_w, layer.qkv_b)
            q, k, v = g.ops("Split", [qkv, sizes], 3, axis=-1)
            q = rope(norm(g.op("Reshape", q, g.i64(0, 0, heads, hd)), layer.q_norm))
            k = rope(norm(g.op("Reshape", k, split_kv), layer.k_norm))
            q = g.op("Transpose", g.op("Reshape", q, split_q), perm=[0, 2, 3, 1, 4])
            k = g.op("Unsqueeze", g.op("Transpose", k, perm=[0, 2, 3, 1]), g.i64(2))
            v = g.op("Reshape", v, split_kv)
            v = g.op("Unsqueeze", g.op("Transpose", v, perm=[0, 2, 1, 3]), g.i64(2))
            scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), bias)
            probs = g.op("Softmax", scores, axis=-1)
            context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 3, 1, 2, 4])
            context = g.op("Reshape", context, merge)
            x = g.op("Add", x, g.linear(context, layer.o_w, layer.o_b))
            h = norm(x, layer.ln2)
            gate, up = g.ops("Split", [g.matmul(h, layer.gate_up_w), gate_up], 2, axis=-1)
            act = g.op("Mul", gate, g.op("Sigmoid", gate))
            x = g.op("Add", x, g.matmul(g.op("Mul", act, up), layer.down_w))
        return norm(x, body.norm)


QWEN3 = Qwen3()
