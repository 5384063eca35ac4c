"""GTE v1.5 (``model_type = "new"``, ``NewModel``): Alibaba-NLP/gte-base-en-v1.5,
gte-large-en-v1.5 and gte-multilingual-base.

A post-LayerNorm encoder with rotary position embeddings (rotate-half, base
``rope_theta``, optionally NTK-scaled by ``rope_scaling``), a fused,
biased ``qkv_proj``, and a gated feed-forward block (GLU): ``up_gate_proj``
(no bias) gives the up half first and the gate second, then
``down_proj(act(gate) * up)``. Per layer::

    x = attn_ln(x + o_proj(attention(rope(q), rope(k), v)))
    x = mlp_ln(x + down_proj(act(gate) * up))

after ``x = embeddings.LayerNorm(word_embeddings[ids] + token_type_embeddings[types])``
(no position table: positions are the rotary's alone).

The hub's ``config.json`` points at remote code (``auto_map`` to
Alibaba-NLP/new-impl), which Synapse never runs: the weights are read by
the names that code gives them (``embeddings.word_embeddings``,
``embeddings.token_type_embeddings``, ``embeddings.LayerNorm``,
``encoder.layer.N.attention.qkv_proj``, ``attention.o_proj``, ``attn_ln``,
``mlp.up_gate_proj``, ``mlp.down_proj``, ``mlp_ln``; with or without the
``new.`` prefix of its task heads), which TEI's ``gte.rs`` reads too. The
remote code's ``unpad_inputs`` (dropping padding before the layers) and
memory-efficient attention are ways to compute the same thing; masked
padding gives the same real positions.

NTK scaling, as the remote code's ``NTKScalingRotaryEmbedding`` does it for a
``factor`` above 1 (it always extends its table past
``max_position_embeddings``, so the scaled frequencies are always the ones
used): ``base = rope_theta * factor``, then every inverse frequency divided
by ``factor ** (2 / head_size)``. Not supported, refused naming
``config.json``: ``mixed_b`` scaling, ``logn_attention_scale``, absolute
positions, ``rms_norm`` layers, activations other than GELU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Classifier
from ..numerics import gelu, gelu_tanh, key_bias, layer_norm, rotate, softmax_
from ..weights import F32, I64, Tensors
from .protocol import Sizes
from .rotary import RotaryAttention, embeddings_graph

#: ``hidden_act`` values served, and whether each is the tanh approximation
_ACTIVATIONS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True}


@attrs.frozen
class GteConfig:
    """The sizes and switches of a GTE (``NewModel``) encoder, from ``config.json``."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    theta: float
    #: NTK ``rope_scaling`` factor (1.0: none)
    ntk: float
    #: the GELU's tanh approximation (``gelu_new``) rather than the exact one
    tanh: bool
    #: ``pack_qkv``: one ``qkv_proj``, else ``q_proj``, ``k_proj``, ``v_proj``
    packed: bool
    types: int

    @property
    def head(self) -> int:
        return self.hidden // self.heads


@attrs.frozen
class GteLayer:
    """One layer's weights, matrices as (in, out)."""

    qkv_w: F32  # (hidden, 3 * hidden): query, key, value side by side
    qkv_b: F32
    o_w: F32
    o_b: F32
    attn_ln_g: F32
    attn_ln_b: F32
    #: (hidden, 2 * intermediate): the up half, then the gate half
    up_gate_w: F32
    down_w: F32
    down_b: F32
    mlp_ln_g: F32
    mlp_ln_b: F32


@attrs.frozen
class GteBody:
    """A GTE encoder's arranged weights."""

    config: GteConfig
    word: F32
    #: ``None``: no token types (``type_vocab_size`` 0)
    token_type: F32 | None
    ln_g: F32
    ln_b: F32
    layers: tuple[GteLayer, ...]
    #: rotary cosines and sines (positions, head size)
    cos: F32
    sin: F32


def gte_config(data: Mapping[str, Any], source: str) -> GteConfig:
    """Read and check ``config.json``: :class:`ModelFilesError` names what is not supported."""
    kind = data.get("position_embedding_type", "rope")
    if kind != "rope":
        raise ModelFilesError(
            source, f"position_embedding_type {kind!r} is not supported; supported: 'rope'"
        )
    norm = data.get("layer_norm_type", "layer_norm")
    if norm != "layer_norm":
        raise ModelFilesError(
            source, f"layer_norm_type {norm!r} is not supported; supported: 'layer_norm'"
        )
    act = data.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise ModelFilesError(
            source, f"hidden_act {act!r} is not supported; supported: {', '.join(_ACTIVATIONS)}"
        )
    if data.get("logn_attention_scale"):
        raise ModelFilesError(
            source, "logn_attention_scale true is not supported; supported: false"
        )
    scaling = data.get("rope_scaling")
    ntk = 1.0
    if scaling is not None:
        if not isinstance(scaling, dict) or scaling.get("type") != "ntk":
            raise ModelFilesError(
                source, f"rope_scaling {scaling!r} is not supported; supported: type 'ntk'"
            )
        if scaling.get("mixed_b") is not None:
            raise ModelFilesError(
                source, "rope_scaling mixed_b is not supported; supported: fixed NTK scaling"
            )
        try:
            ntk = float(scaling["factor"])
        except (KeyError, TypeError, ValueError):
            raise ModelFilesError(source, "rope_scaling needs a numeric factor") from None
    try:
        config = GteConfig(
            hidden=int(data["hidden_size"]),
            heads=int(data["num_attention_heads"]),
            layers=int(data["num_hidden_layers"]),
            intermediate=int(data["intermediate_size"]),
            eps=float(data.get("layer_norm_eps", 1e-12)),
            theta=float(data.get("rope_theta", 10000.0)),
            ntk=ntk,
            tanh=_ACTIVATIONS[act],
            packed=bool(data.get("pack_qkv", True)),
            types=int(data.get("type_vocab_size", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(
            source, f"not a GTE (NewModel) config: missing or bad {exc}"
        ) from None
    if config.hidden % config.heads or config.head % 2:
        raise ModelFilesError(
            source,
            "hidden_size is not an even multiple of num_attention_heads (rotary needs it)",
        )
    return config


def rope_tables(c: GteConfig, positions: int) -> tuple[F32, F32]:
    """cos and sin (positions, head) of the rotary angles, NTK-scaled when
    ``rope_scaling`` says so, in float32 as the remote code computes them."""
    base = c.theta * c.ntk if c.ntk > 1.0 else c.theta
    exponents = np.arange(0, c.head, 2, dtype=np.float32) / np.float32(c.head)
    inverse = (np.float32(1.0) / np.power(np.float32(base), exponents)).astype(np.float32)
    if c.ntk > 1.0:
        inverse = (inverse / np.float32(c.ntk ** (2.0 / c.head))).astype(np.float32)
    angles = np.arange(positions, dtype=np.float32)[:, None] * inverse[None, :]
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles), np.sin(angles)


@attrs.frozen
class Gte:
    """The :class:`~synapse_models.families.Family` of GTE v1.5 (``NewModel``)."""

    name: str = "gte"
    model_types: tuple[str, ...] = ("new",)
    cross_encoders: tuple[str, ...] = ()
    #: the remote code's task heads keep the body under ``new.``
    prefixes: tuple[str, ...] = ("new.",)
    word_embeddings: str = "embeddings.word_embeddings.weight"
    kept_float: tuple[tuple[int, str], ...] = ()
    vocab_padded: bool = True

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        c = gte_config(config, source)
        try:
            positions = int(config["max_position_embeddings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"missing or bad {exc}") from None
        return Sizes(c.hidden, positions)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> GteBody:
        c = gte_config(config, tensors.source)
        get, matrix = tensors.get, tensors.matrix
        layers = []
        for i in range(c.layers):
            p = f"encoder.layer.{i}."
            a = p + "attention."
            if c.packed:
                qkv_w, qkv_b = matrix(a + "qkv_proj.weight"), get(a + "qkv_proj.bias")
            else:
                parts = [tensors.linear(a + f"{n}_proj") for n in "qkv"]
                qkv_w = np.ascontiguousarray(np.concatenate([w for w, _ in parts], axis=1))
                qkv_b = np.concatenate([b for _, b in parts])
            layers.append(
                GteLayer(
                    qkv_w=qkv_w,
                    qkv_b=qkv_b,
                    o_w=matrix(a + "o_proj.weight"),
                    o_b=get(a + "o_proj.bias"),
                    attn_ln_g=get(p + "attn_ln.weight"),
                    attn_ln_b=get(p + "attn_ln.bias"),
                    up_gate_w=matrix(p + "mlp.up_gate_proj.weight"),
                    down_w=matrix(p + "mlp.down_proj.weight"),
                    down_b=get(p + "mlp.down_proj.bias"),
                    mlp_ln_g=get(p + "mlp_ln.weight"),
                    mlp_ln_b=get(p + "mlp_ln.bias"),
                )
            )
        cos, sin = rope_tables(c, sizes.positions)
        body = GteBody(
            config=c,
            word=get(self.word_embeddings),
            token_type=get("embeddings.token_type_embeddings.weight") if c.types > 0 else None,
            ln_g=get("embeddings.LayerNorm.weight"),
            ln_b=get("embeddings.LayerNorm.bias"),
            layers=tuple(layers),
            cos=cos,
            sin=sin,
        )
        first = body.layers[0]
        if (
            body.word.shape[1] != c.hidden
            or first.qkv_w.shape != (c.hidden, 3 * c.hidden)
            or first.up_gate_w.shape != (c.hidden, 2 * c.intermediate)
        ):
            raise ModelFilesError(
                tensors.source,
                "the weights do not match config.json's hidden_size and intermediate_size",
            )
        return body

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        raise ModelFilesError(tensors.source, "GTE (NewModel) is served as an embedder only")

    def token_types(self, body: GteBody) -> bool:
        return body.token_type is not None

    def hidden_states(self, body: GteBody, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, head, inner = c.heads, c.head, c.intermediate
        x = body.word[ids]
        if body.token_type is not None:
            x = x + body.token_type[types]
        x = layer_norm(x.reshape(rows * width, c.hidden), body.ln_g, body.ln_b, c.eps)
        bias = key_bias(mask)
        cos, sin = body.cos[:width], body.sin[:width]
        scale = np.float32(1.0 / np.sqrt(head))
        act = gelu_tanh if c.tanh else gelu
        for layer in body.layers:
            qkv = x @ layer.qkv_w
            qkv += layer.qkv_b
            qkv = qkv.reshape(rows, width, 3, heads, head).transpose(2, 0, 3, 1, 4)
            q, k, v = rotate(qkv[0], cos, sin), rotate(qkv[1], cos, sin), qkv[2]
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += bias
            softmax_(scores)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
            attended = context @ layer.o_w
            attended += layer.o_b
            x = layer_norm(x + attended, layer.attn_ln_g, layer.attn_ln_b, c.eps)
            up_gate = x @ layer.up_gate_w
            gated = act(np.ascontiguousarray(up_gate[:, inner:])) * up_gate[:, :inner]
            down = gated @ layer.down_w
            down += layer.down_b
            x = layer_norm(x + down, layer.mlp_ln_g, layer.mlp_ln_b, c.eps)
        out: F32 = x.reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: GteBody) -> str:
        c = body.config
        head, inner = c.head, c.intermediate
        x = embeddings_graph(g, body.word, body.token_type, body.ln_g, body.ln_b, c.eps)
        attention = RotaryAttention(g, body.cos, body.sin, c.heads, head, c.hidden)
        for layer in body.layers:
            context = attention.attend(x, layer.qkv_w, layer.qkv_b)
            attended = g.linear(context, layer.o_w, layer.o_b)
            x = g.layer_norm(g.op("Add", x, attended), layer.attn_ln_g, layer.attn_ln_b, c.eps)
            up_gate = g.matmul(x, layer.up_gate_w)
            up, gate = g.ops("Split", [up_gate, g.i64(inner, inner)], 2, axis=-1)
            gate = g.gelu_tanh(gate) if c.tanh else g.gelu(gate)
            down = g.linear(g.op("Mul", gate, up), layer.down_w, layer.down_b)
            x = g.layer_norm(g.op("Add", x, down), layer.mlp_ln_g, layer.mlp_ln_b, c.eps)
        return x


GTE = Gte()
