"""A BERT-family encoder in numpy: embeddings, self-attention layers, pooling or a head.

One forward pass serves BERT, XLM-RoBERTa and MPNet (their differences are
in the weights :mod:`synapse_cpu.architectures` arranges: where positions
start, whether there are token types, MPNet's relative position bias), and
ends in what the folder asks for: CLS, mean, max or last-token pooling,
optionally L2-normalised, or a cross-encoder's classification head (one
logit per row).

Padding is masked out of attention (its scores get the float32 minimum, so
their softmax weight is exactly zero) and out of the pooling, so a text's
vector does not depend on its batch mates or on how far it was padded.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np
import numpy.typing as npt

from .folder import Pooling

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@attrs.frozen
class EncoderConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float


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
class Head:
    """A sequence-classification head on the first token: ``tanh(dense) -> out``
    (BERT's pooler and classifier; XLM-R's ``classifier.dense`` and ``out_proj``)."""

    dense_w: F32
    dense_b: F32
    out_w: F32  # (hidden, 1)
    out_b: F32


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
class EncoderWeights:
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
    pooling: Pooling = "mean"
    normalize: bool = True
    #: a cross-encoder's head: the output is one logit per row, not a vector
    head: Head | None = None

    @property
    def nbytes(self) -> int:
        tensors = [self.word, self.position, self.ln_g, self.ln_b]
        tensors += [t for layer in self.layers for t in attrs.astuple(layer, recurse=False)]
        if self.token_type is not None:
            tensors.append(self.token_type)
        if self.head is not None:
            tensors += list(attrs.astuple(self.head, recurse=False))
        return sum(t.nbytes for t in tensors)


# -- the forward pass ----------------------------------------------------------------

_SQRT_HALF = np.float32(np.sqrt(0.5))
# Abramowitz & Stegun 7.1.26: erf to an absolute error below 1.5e-7, enough
# for float32; numpy has no erf and BERT's GELU is the exact (erf) one.
_P = np.float32(0.3275911)
_A = tuple(
    np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)
_ONE, _HALF = np.float32(1.0), np.float32(0.5)
#: what sentence-transformers puts in masked positions before max pooling
MAX_POOL_FILL = np.float32(-1e9)


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


def hidden_states(weights: EncoderWeights, ids: I64, types: I64, mask: F32) -> F32:
    """The last layer's token vectors of a packed batch, (rows, width, hidden)."""
    c = weights.config
    rows, width = ids.shape
    heads, head = c.heads, c.hidden // c.heads
    x = weights.word[ids] + weights.position[:width]
    if weights.token_type is not None:
        x += weights.token_type[types]
    x = layer_norm(x.reshape(rows * width, c.hidden), weights.ln_g, weights.ln_b, c.eps)
    # Padding keys get the float32 minimum: exp() of it is exactly 0.
    bias = ((np.float32(1.0) - mask) * np.finfo(np.float32).min)[:, None, None, :]
    relative = None if weights.relative is None else weights.relative.for_width(width)
    scale = np.float32(1.0 / np.sqrt(head))
    for layer in weights.layers:
        qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(rows, width, 3, heads, head)
        q = qkv[:, :, 0].transpose(0, 2, 1, 3)
        k = qkv[:, :, 1].transpose(0, 2, 3, 1)
        v = qkv[:, :, 2].transpose(0, 2, 1, 3)
        scores = q @ k
        scores *= scale
        if relative is not None:
            scores += relative
        scores += bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(rows * width, c.hidden)
        x = layer_norm(x + (context @ layer.out_w + layer.out_b), layer.ln1_g, layer.ln1_b, c.eps)
        up = gelu(x @ layer.up_w + layer.up_b)
        x = layer_norm(x + (up @ layer.down_w + layer.down_b), layer.ln2_g, layer.ln2_b, c.eps)
    out: F32 = x.reshape(rows, width, c.hidden)
    return out


def pool(hidden: F32, mask: F32, pooling: Pooling) -> F32:
    """One vector per row, as sentence-transformers' Pooling module computes it."""
    if pooling == "cls":
        return np.ascontiguousarray(hidden[:, 0])
    if pooling == "mean":
        summed: F32 = (hidden * mask[:, :, None]).sum(axis=1)
        mean: F32 = summed / mask.sum(axis=1, keepdims=True)
        return mean
    if pooling == "max":
        filled: F32 = np.where(mask[:, :, None] > 0, hidden, MAX_POOL_FILL)
        out: F32 = filled.max(axis=1)
        return out
    last = mask.sum(axis=1).astype(np.int64) - 1  # right-padded rows
    return np.ascontiguousarray(hidden[np.arange(hidden.shape[0]), last])


def l2_normalize(x: F32) -> F32:
    norms = np.maximum(np.linalg.norm(x, axis=1, keepdims=True), np.float32(1e-12))
    out: F32 = (x / norms).astype(np.float32, copy=False)
    return out


def encode(weights: EncoderWeights, ids: I64, types: I64, mask: F32) -> F32:
    """Sentence vectors (rows, hidden), or a cross-encoder's logits (rows,)."""
    hidden = hidden_states(weights, ids, types, mask)
    if weights.head is not None:
        h = weights.head
        first = np.tanh(hidden[:, 0] @ h.dense_w + h.dense_b)
        logits: F32 = (first @ h.out_w + h.out_b)[:, 0]
        return logits
    pooled = pool(hidden, mask, weights.pooling)
    return l2_normalize(pooled) if weights.normalize else pooled.astype(np.float32, copy=False)


# -- packing ---------------------------------------------------------------------------


@attrs.frozen
class Framing:
    """The special tokens a model's tokenizer frames sequences with, as its
    post-processor adds them: ``[CLS] a [SEP]`` and ``[CLS] a [SEP] b [SEP]``
    (BERT, second segment of token type 1), ``<s> a </s>`` and
    ``<s> a </s></s> b </s>`` (XLM-R, MPNet)."""

    before: tuple[int, ...]
    after: tuple[int, ...]
    #: between the two sequences of a pair, and after the second
    between: tuple[int, ...]
    pair_after: tuple[int, ...]
    #: the token type of the second sequence and what follows it
    second_type: int = 0

    @property
    def single(self) -> int:
        """Positions the specials of one sequence take."""
        return len(self.before) + len(self.after)

    @property
    def pair(self) -> int:
        """Positions the specials of a pair take."""
        return len(self.before) + len(self.between) + len(self.pair_after)


def pack(sequences: Sequence[Sequence[int]], framing: Framing) -> tuple[I64, I64, F32]:
    """Each sequence framed, right-padded to the longest: ids, token types, mask."""
    before, after = list(framing.before), list(framing.after)
    framed = [before + list(s) + after for s in sequences]
    return _padded(framed, [[0] * len(f) for f in framed])


def pack_pairs(
    query: Sequence[int], documents: Sequence[Sequence[int]], framing: Framing
) -> tuple[I64, I64, F32]:
    """``query`` paired with each document, framed as the tokenizer frames a pair."""
    first = [*framing.before, *query, *framing.between]
    framed, types = [], []
    for doc in documents:
        second = [*doc, *framing.pair_after]
        framed.append(first + second)
        types.append([0] * len(first) + [framing.second_type] * len(second))
    return _padded(framed, types)


def _padded(framed: list[list[int]], types: list[list[int]]) -> tuple[I64, I64, F32]:
    width = max(len(f) for f in framed)
    if all(len(f) == width for f in framed):  # nothing to pad (one short text, say)
        shape = (len(framed), width)
        ids, kinds = np.array(framed, dtype=np.int64), np.array(types, dtype=np.int64)
        return ids, kinds, np.ones(shape, dtype=np.float32)
    ids = np.zeros((len(framed), width), dtype=np.int64)
    kinds = np.zeros((len(framed), width), dtype=np.int64)
    mask = np.zeros((len(framed), width), dtype=np.float32)
    for row, (seq, kind) in enumerate(zip(framed, types, strict=True)):
        ids[row, : len(seq)] = seq
        kinds[row, : len(seq)] = kind
        mask[row, : len(seq)] = 1.0
    return ids, kinds, mask
