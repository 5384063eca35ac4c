"""BERT, XLM-RoBERTa and MPNet checkpoints, arranged for :mod:`synapse_cpu.bert`.

The three share one encoder; what differs is here:

- **BERT**: positions from 0, token types (a pair's second segment is type 1);
  a cross-encoder's head is the pooler (``tanh``) and ``classifier``.
- **XLM-RoBERTa**: positions start after the padding index (``pad_token_id +
  1``, as transformers' ``create_position_ids_from_input_ids``); one token
  type; a cross-encoder's head is ``classifier.dense`` (``tanh``) and
  ``classifier.out_proj``.
- **MPNet**: positions as XLM-R's, no token types, attention named
  ``attn.q/k/v/o``, and a relative position bias (T5-style buckets) added to
  every layer's attention scores.

Weights are taken out of the tensor mapping as they are used (it may load
lazily: the file is then never in memory twice), with or without the
``bert.`` / ``roberta.`` / ``mpnet.`` prefix a task head's checkpoint has.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping

import numpy as np
import numpy.typing as npt

from .bert import F32, EncoderConfig, EncoderWeights, Head, Layer, RelativeBias
from .errors import ModelFilesError
from .files import PREFIXES
from .folder import Layout


def encoder_config(data: Mapping[str, object], source: str) -> EncoderConfig:
    try:
        config = EncoderConfig(
            hidden=int(data["hidden_size"]),  # type: ignore[call-overload]
            heads=int(data["num_attention_heads"]),  # type: ignore[call-overload]
            layers=int(data["num_hidden_layers"]),  # type: ignore[call-overload]
            intermediate=int(data["intermediate_size"]),  # type: ignore[call-overload]
            eps=float(data.get("layer_norm_eps", 1e-12)),  # type: ignore[arg-type]
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


def arrange(
    tensors: MutableMapping[str, npt.NDArray[np.generic]],
    config: EncoderConfig,
    layout: Layout,
    source: str,
) -> EncoderWeights:
    """The weights of ``layout``'s architecture, pooling and head, for the forward pass."""
    arch = layout.architecture
    prefix = PREFIXES[arch]

    def get(name: str) -> F32:
        for key in (name, prefix + name):
            if key in tensors:
                return np.ascontiguousarray(tensors.pop(key), dtype=np.float32)
        raise ModelFilesError(source, f"tensor {name!r} is missing: not a {arch} checkpoint")

    def linear(name: str) -> tuple[F32, F32]:
        # torch Linear keeps (out, in); the forward multiplies by (in, out).
        return np.ascontiguousarray(get(name + ".weight").T), get(name + ".bias")

    mpnet = arch == "mpnet"
    layers = []
    for i in range(config.layers):
        p = f"encoder.layer.{i}."
        if mpnet:
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
    position = np.ascontiguousarray(get("embeddings.position_embeddings.weight")[layout.offset :])
    relative = None
    if mpnet:
        weight = get("encoder.relative_attention_bias.weight")
        relative = RelativeBias(relative_buckets(len(position), len(weight)), weight)
    weights = EncoderWeights(
        config=config,
        word=get("embeddings.word_embeddings.weight"),
        position=position,
        token_type=None if mpnet else get("embeddings.token_type_embeddings.weight"),
        ln_g=get("embeddings.LayerNorm.weight"),
        ln_b=get("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
        relative=relative,
        pooling=layout.pooling,
        normalize=layout.normalize,
        head=_head(linear, arch) if layout.cross_encoder else None,
    )
    if weights.word.shape[1] != config.hidden:
        raise ModelFilesError(source, "the word embeddings do not match config.json's hidden_size")
    return weights


def _head(linear: Callable[[str], tuple[F32, F32]], arch: str) -> Head:
    if arch == "bert":
        dense_w, dense_b = linear("pooler.dense")
        out_w, out_b = linear("classifier")
    else:
        dense_w, dense_b = linear("classifier.dense")
        out_w, out_b = linear("classifier.out_proj")
    return Head(dense_w, dense_b, np.ascontiguousarray(out_w), out_b)
