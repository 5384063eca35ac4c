"""NomicBERT (``nomic_bert``): nomic-ai/nomic-embed-text-v1 and v1.5.

A post-LayerNorm encoder as BERT's, but with rotary position embeddings
(rotate-half, base ``rotary_emb_base``) instead of a position table, a fused
``Wqkv`` projection, a SwiGLU feed-forward block (``silu(fc12 x) * fc11 x``,
then ``fc2``) and no biases in its projections.

The hub's ``config.json`` points at remote code (``auto_map``), which is never
run: the weights are read by the names the hub checkpoint uses
(``emb_ln``, ``encoder.layers.N.attn.Wqkv``, ``attn.out_proj``, ``mlp.fc11``,
``mlp.fc12``, ``mlp.fc2``, ``norm1``, ``norm2``), and the config by its
GPT-2-style keys (``n_embd``, ``n_head``, ``n_layer``, ``n_inner``,
``layer_norm_epsilon``; transformers' native names are read where those are
missing). Biases follow the remote code's switches (``qkv_proj_bias`` also
covers ``out_proj``, ``mlp_fc1_bias`` ``fc11`` and ``fc12``, ``mlp_fc2_bias``
``fc2``); what the released models do not use (pre-norm blocks, interleaved
or partial rotary, rotary scaling, mixtures of experts) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from ..errors import ModelFilesError
from ..graph import Graph
from ..heads import Classifier
from ..numerics import key_bias, layer_norm, rotary, rotate, silu, softmax_
from ..weights import F32, I64, Tensors
from .protocol import Sizes
from .rotary import RotaryAttention, embeddings_graph


@attrs.frozen
class NomicConfig:
    """The sizes and switches of a NomicBERT encoder, from ``config.json``."""

    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    base: float
    qkv_bias: bool
    fc1_bias: bool
    fc2_bias: bool

    @property
    def head(self) -> int:
        return self.hidden // self.heads


@attrs.frozen
class NomicLayer:
    """One layer's weights, matrices as (in, out)."""

    qkv_w: F32  # (hidden, 3 * hidden): query, key, value side by side
    qkv_b: F32 | None
    out_w: F32
    out_b: F32 | None
    ln1_g: F32
    ln1_b: F32
    #: (hidden, 2 * intermediate): the gate (``fc12``) then the value (``fc11``)
    up_w: F32
    up_b: F32 | None
    down_w: F32
    down_b: F32 | None
    ln2_g: F32
    ln2_b: F32


@attrs.frozen
class NomicBody:
    """A NomicBERT encoder's arranged weights."""

    config: NomicConfig
    word: F32
    #: ``None``: no token types (``type_vocab_size`` 0)
    token_type: F32 | None
    ln_g: F32
    ln_b: F32
    layers: tuple[NomicLayer, ...]
    #: rotary cosines and sines (positions, head size)
    cos: F32
    sin: F32


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` that ``config`` has (``KeyError`` naming the first)."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    raise KeyError(keys[0])


def nomic_config(data: Mapping[str, Any], source: str) -> NomicConfig:
    """Read and check ``config.json``: :class:`ModelFilesError` names what is not supported."""
    # The remote code's defaults where a key is missing (NomicBertConfig).
    refused = {
        "prenorm": (data.get("prenorm", False), False),
        "rotary_emb_interleaved": (data.get("rotary_emb_interleaved", False), False),
        "rotary_emb_fraction": (float(data.get("rotary_emb_fraction", 0.0)), 1.0),
        "rotary_scaling_factor": (data.get("rotary_scaling_factor"), None),
        "activation_function": (data.get("activation_function", "swiglu"), "swiglu"),
        "use_rms_norm": (data.get("use_rms_norm", False), False),
        "parallel_block": (data.get("parallel_block", False), False),
        "causal": (data.get("causal", False), False),
    }
    for key, (value, supported) in refused.items():
        if value != supported:
            raise ModelFilesError(
                source, f"{key} {value!r} is not supported; supported: {supported!r}"
            )
    if data.get("moe_every_n_layers") or data.get("num_experts"):
        raise ModelFilesError(
            source, "mixture-of-experts layers (num_experts) are not supported; supported: dense"
        )
    try:
        config = NomicConfig(
            hidden=int(_first(data, "n_embd", "hidden_size")),
            heads=int(_first(data, "n_head", "num_attention_heads")),
            layers=int(_first(data, "n_layer", "num_hidden_layers")),
            intermediate=int(_first(data, "n_inner", "intermediate_size")),
            eps=float(_first(data, "layer_norm_epsilon", "layer_norm_eps")),
            base=float(data.get("rotary_emb_base", 1000)),
            qkv_bias=bool(data.get("qkv_proj_bias", True)),
            fc1_bias=bool(data.get("mlp_fc1_bias", True)),
            fc2_bias=bool(data.get("mlp_fc2_bias", True)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFilesError(source, f"not a NomicBERT config: missing or bad {exc}") from None
    if config.hidden % config.heads or config.head % 2:
        raise ModelFilesError(
            source, "n_embd is not an even multiple of n_head (the rotary halves need it)"
        )
    return config


@attrs.frozen
class Nomic:
    """The :class:`~synapse_models.families.Family` of NomicBERT."""

    name: str = "nomic-bert"
    model_types: tuple[str, ...] = ("nomic_bert",)
    cross_encoders: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()
    word_embeddings: str = "embeddings.word_embeddings.weight"
    kept_float: tuple[tuple[int, str], ...] = ((0, "down"), (2, "up"))
    #: ``pad_vocab_size_multiple`` 64: 30528 rows for 30522 tokens
    vocab_padded: bool = True

    def sizes(self, config: Mapping[str, Any], source: str) -> Sizes:
        c = nomic_config(config, source)
        try:
            positions = int(_first(config, "max_position_embeddings", "n_positions"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"missing or bad {exc}") from None
        return Sizes(c.hidden, positions)

    def arrange(self, tensors: Tensors, config: Mapping[str, Any], sizes: Sizes) -> NomicBody:
        c = nomic_config(config, tensors.source)
        get, matrix = tensors.get, tensors.matrix

        def bias(name: str, present: bool) -> F32 | None:
            return get(name) if present else None

        def joined(first: F32 | None, second: F32 | None) -> F32 | None:
            return None if first is None or second is None else np.concatenate([first, second])

        layers = []
        for i in range(c.layers):
            p = f"encoder.layers.{i}."
            gate_w, value_w = matrix(p + "mlp.fc12.weight"), matrix(p + "mlp.fc11.weight")
            gate_b = bias(p + "mlp.fc12.bias", c.fc1_bias)
            value_b = bias(p + "mlp.fc11.bias", c.fc1_bias)
            layers.append(
                NomicLayer(
                    qkv_w=matrix(p + "attn.Wqkv.weight"),
                    qkv_b=bias(p + "attn.Wqkv.bias", c.qkv_bias),
                    out_w=matrix(p + "attn.out_proj.weight"),
                    out_b=bias(p + "attn.out_proj.bias", c.qkv_bias),
                    ln1_g=get(p + "norm1.weight"),
                    ln1_b=get(p + "norm1.bias"),
                    # One product for both halves of the SwiGLU.
                    up_w=np.ascontiguousarray(np.concatenate([gate_w, value_w], axis=1)),
                    up_b=joined(gate_b, value_b),
                    down_w=matrix(p + "mlp.fc2.weight"),
                    down_b=bias(p + "mlp.fc2.bias", c.fc2_bias),
                    ln2_g=get(p + "norm2.weight"),
                    ln2_b=get(p + "norm2.bias"),
                )
            )
        types = "embeddings.token_type_embeddings.weight"
        cos, sin = rotary(sizes.positions, c.head, c.base)
        body = NomicBody(
            config=c,
            word=get(self.word_embeddings),
            token_type=get(types) if int(config.get("type_vocab_size", 2)) > 0 else None,
            ln_g=get("emb_ln.weight"),
            ln_b=get("emb_ln.bias"),
            layers=tuple(layers),
            cos=cos,
            sin=sin,
        )
        if body.word.shape[1] != c.hidden or body.layers[0].qkv_w.shape[1] != 3 * c.hidden:
            raise ModelFilesError(
                tensors.source, "the weights do not match config.json's n_embd (hidden size)"
            )
        return body

    def classifier(self, tensors: Tensors, config: Mapping[str, Any]) -> Classifier:
        raise ModelFilesError(tensors.source, "NomicBERT is served as an embedder only")

    def token_types(self, body: NomicBody) -> bool:
        return body.token_type is not None

    def hidden_states(self, body: NomicBody, ids: I64, types: I64, mask: F32) -> F32:
        c = body.config
        rows, width = ids.shape
        heads, head, inner = c.heads, c.head, c.intermediate
        x = body.word[ids]
        if body.token_type is not None:
            x += body.token_type[types]
        x = layer_norm(x.reshape(rows * width, c.hidden), body.ln_g, body.ln_b, c.eps)
        bias = key_bias(mask)
        cos, sin = body.cos[:width], body.sin[:width]
        scale = np.float32(1.0 / np.sqrt(head))
        for layer in body.layers:
            qkv = x @ layer.qkv_w
            if layer.qkv_b is not None:
                qkv += layer.qkv_b
            qkv = qkv.reshape(rows, width, 3, heads, head).transpose(2, 0, 3, 1, 4)
            q, k, v = rotate(qkv[0], cos, sin), rotate(qkv[1], cos, sin), qkv[2]
            scores = q @ k.transpose(0, 1, 3, 2)
            scores *= scale
            scores += bias
            softmax_(scores)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
            attended = context @ layer.out_w
            if layer.out_b is not None:
                attended += layer.out_b
            x = layer_norm(x + attended, layer.ln1_g, layer.ln1_b, c.eps)
            up = x @ layer.up_w
            if layer.up_b is not None:
                up += layer.up_b
            gate = up[:, :inner]
            down = (silu(gate) * up[:, inner:]) @ layer.down_w
            if layer.down_b is not None:
                down += layer.down_b
            x = layer_norm(x + down, layer.ln2_g, layer.ln2_b, c.eps)
        out: F32 = x.reshape(rows, width, c.hidden)
        return out

    def graph(self, g: Graph, body: NomicBody) -> str:
        c = body.config
        head, inner = c.head, c.intermediate
        x = embeddings_graph(g, body.word, body.token_type, body.ln_g, body.ln_b, c.eps)
        attention = RotaryAttention(g, body.cos, body.sin, c.heads, head, c.hidden)
        for layer in body.layers:
            context = attention.attend(x, layer.qkv_w, layer.qkv_b)
            attended = g.linear(context, layer.out_w, layer.out_b)
            x = g.layer_norm(g.op("Add", x, attended), layer.ln1_g, layer.ln1_b, c.eps)
            up = g.linear(x, layer.up_w, layer.up_b)
            gate, value = g.ops("Split", [up, g.i64(inner, inner)], 2, axis=-1)
            swiglu = g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), value)
            down = g.linear(swiglu, layer.down_w, layer.down_b)
            x = g.layer_norm(g.op("Add", x, down), layer.ln2_g, layer.ln2_b, c.eps)
        return x


NOMIC = Nomic()
