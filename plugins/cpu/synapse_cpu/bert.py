"""A BERT encoder in numpy: embeddings, self-attention layers, mean pooling.

Padding is masked out of attention (its scores get the float32 minimum, so
their softmax weight is exactly zero) and out of the pooling, so a text's
vector does not depend on its batch mates or on how far it was padded.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence

import attrs
import numpy as np
import numpy.typing as npt

from .errors import ModelFilesError

F32 = npt.NDArray[np.float32]
CLS_ID_DEFAULT, SEP_ID_DEFAULT = 101, 102


@attrs.frozen
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    max_positions: int
    eps: float

    @classmethod
    def from_json(cls, data: Mapping[str, object], source: str) -> BertConfig:
        try:
            config = cls(
                hidden=int(data["hidden_size"]),  # type: ignore[call-overload]
                heads=int(data["num_attention_heads"]),  # type: ignore[call-overload]
                layers=int(data["num_hidden_layers"]),  # type: ignore[call-overload]
                intermediate=int(data["intermediate_size"]),  # type: ignore[call-overload]
                max_positions=int(data["max_position_embeddings"]),  # type: ignore[call-overload]
                eps=float(data.get("layer_norm_eps", 1e-12)),  # type: ignore[arg-type]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(source, f"not a BERT config: missing or bad {exc}") from None
        act = data.get("hidden_act", "gelu")
        if act != "gelu" or data.get("position_embedding_type", "absolute") != "absolute":
            raise ModelFilesError(
                source, "only BERT encoders with gelu and absolute positions are supported"
            )
        if config.hidden % config.heads:
            raise ModelFilesError(source, "hidden_size is not a multiple of num_attention_heads")
        return config


@attrs.frozen
class Layer:
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
class BertWeights:
    config: BertConfig
    word: F32
    position: F32
    token_type: F32  # row 0: single-sequence inputs
    ln_g: F32
    ln_b: F32
    layers: tuple[Layer, ...]

    @property
    def nbytes(self) -> int:
        tensors = [self.word, self.position, self.token_type, self.ln_g, self.ln_b]
        tensors += [t for layer in self.layers for t in attrs.astuple(layer, recurse=False)]
        return sum(t.nbytes for t in tensors)


def weights_from_tensors(
    tensors: MutableMapping[str, npt.NDArray[np.generic]], config: BertConfig, source: str
) -> BertWeights:
    """Arrange safetensors tensors (with or without a ``bert.`` prefix) for the
    forward pass, taking each out of ``tensors`` as it is used (``tensors`` may
    load lazily: the file is then never in memory twice)."""

    def get(name: str) -> F32:
        for key in (name, "bert." + name):
            if key in tensors:
                return np.ascontiguousarray(tensors.pop(key), dtype=np.float32)
        raise ModelFilesError(source, f"tensor {name!r} is missing: not a BERT checkpoint")

    def linear(prefix: str) -> tuple[F32, F32]:
        # torch Linear keeps (out, in); the forward multiplies by (in, out).
        return np.ascontiguousarray(get(prefix + ".weight").T), get(prefix + ".bias")

    layers = []
    for i in range(config.layers):
        p = f"encoder.layer.{i}."
        q, k, v = (linear(p + f"attention.self.{n}") for n in ("query", "key", "value"))
        out_w, out_b = linear(p + "attention.output.dense")
        up_w, up_b = linear(p + "intermediate.dense")
        down_w, down_b = linear(p + "output.dense")
        layers.append(
            Layer(
                qkv_w=np.ascontiguousarray(np.concatenate([q[0], k[0], v[0]], axis=1)),
                qkv_b=np.concatenate([q[1], k[1], v[1]]),
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
    weights = BertWeights(
        config=config,
        word=get("embeddings.word_embeddings.weight"),
        position=get("embeddings.position_embeddings.weight"),
        token_type=get("embeddings.token_type_embeddings.weight")[0].copy(),
        ln_g=get("embeddings.LayerNorm.weight"),
        ln_b=get("embeddings.LayerNorm.bias"),
        layers=tuple(layers),
    )
    if weights.word.shape[1] != config.hidden:
        raise ModelFilesError(source, "the word embeddings do not match config.json's hidden_size")
    return weights


def pack(
    sequences: Sequence[Sequence[int]], cls_id: int, sep_id: int
) -> tuple[npt.NDArray[np.int64], F32]:
    """``[CLS] ids [SEP]`` per sequence, right-padded to the longest, and its mask."""
    width = max(len(s) for s in sequences) + 2
    ids = np.zeros((len(sequences), width), dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.float32)
    for row, seq in enumerate(sequences):
        n = len(seq)
        ids[row, 0] = cls_id
        ids[row, 1 : n + 1] = seq
        ids[row, n + 1] = sep_id
        mask[row, : n + 2] = 1.0
    return ids, mask


# -- the forward pass ----------------------------------------------------------------

_SQRT_HALF = np.float32(np.sqrt(0.5))
# Abramowitz & Stegun 7.1.26: erf to an absolute error below 1.5e-7, enough
# for float32; numpy has no erf and BERT's GELU is the exact (erf) one.
_P = np.float32(0.3275911)
_A = tuple(
    np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)
_ONE, _HALF = np.float32(1.0), np.float32(0.5)


def erf(x: F32) -> F32:
    """The error function of ``x`` to float32 precision."""
    a = np.abs(x)
    t = a * _P
    t += _ONE
    np.reciprocal(t, out=t)
    poly = t * _A[0]
    for coefficient in _A[1:]:
        poly += coefficient
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(_ONE, poly, out=poly)
    np.copysign(poly, x, out=poly)
    return poly


def gelu(x: F32) -> F32:
    """``x * Phi(x)`` with the exact normal CDF, computed in place in ``x``."""
    cdf = erf(x * _SQRT_HALF)
    cdf += _ONE
    cdf *= _HALF
    x *= cdf
    return x


def layer_norm(x: F32, g: F32, b: F32, eps: float) -> F32:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    out: F32 = centred / np.sqrt(var + np.float32(eps)) * g + b
    return out


def encode(weights: BertWeights, ids: npt.NDArray[np.int64], mask: F32) -> F32:
    """Mean-pooled, L2-normalised sentence vectors of a packed batch, (rows, hidden)."""
    c = weights.config
    rows, width = ids.shape
    heads, head = c.heads, c.hidden // c.heads
    x = weights.word[ids] + weights.position[:width] + weights.token_type
    x = layer_norm(x.reshape(rows * width, c.hidden), weights.ln_g, weights.ln_b, c.eps)
    # Padding keys get the float32 minimum: exp() of it is exactly 0.
    bias = ((np.float32(1.0) - mask) * np.finfo(np.float32).min)[:, None, None, :]
    scale = np.float32(1.0 / np.sqrt(head))
    for layer in weights.layers:
        qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(rows, width, 3, heads, head)
        q = qkv[:, :, 0].transpose(0, 2, 1, 3)
        k = qkv[:, :, 1].transpose(0, 2, 3, 1)
        v = qkv[:, :, 2].transpose(0, 2, 1, 3)
        scores = q @ k
        scores *= scale
        scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
        x = layer_norm(x + (context @ layer.out_w + layer.out_b), layer.ln1_g, layer.ln1_b, c.eps)
        up = gelu(x @ layer.up_w + layer.up_b)
        x = layer_norm(x + (up @ layer.down_w + layer.down_b), layer.ln2_g, layer.ln2_b, c.eps)
    hidden = x.reshape(rows, width, c.hidden)
    pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), np.float32(1e-12))
    out: F32 = (pooled / norms).astype(np.float32, copy=False)
    return out
