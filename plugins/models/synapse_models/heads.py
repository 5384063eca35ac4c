"""What follows a family's encoder body, shared by every family: poolings,
sentence-transformers ``Dense`` modules, ``Normalize``, and the
sequence-classification heads of cross-encoders.

A family's body gives token vectors (rows, width, hidden); an embedder pools
them (``cls``, ``mean``, ``max`` or ``lasttoken``, over the mask, as
sentence-transformers' Pooling module does), runs its Dense modules in order,
and may L2-normalise; a cross-encoder's :class:`Classifier` reads the first
token (or the mean of the tokens, or an LLM reranker's last token) and gives
one logit per row. The ONNX graph of each is in :mod:`synapse_models.onnx_file`:
the two compute the same.
"""

from __future__ import annotations

from typing import Literal

import attrs
import numpy as np

from .numerics import gelu, layer_norm
from .weights import F32

Pooling = Literal["cls", "mean", "max", "lasttoken"]
POOLINGS: tuple[Pooling, ...] = ("cls", "mean", "max", "lasttoken")
Activation = Literal["identity", "tanh", "gelu"]
#: what sentence-transformers puts in masked positions before max pooling
MAX_POOL_FILL = np.float32(-1e9)


@attrs.frozen
class Dense:
    """A sentence-transformers ``Dense`` module: ``activation(x @ weight + bias)``."""

    weight: F32  # (in, out)
    bias: F32 | None
    activation: Activation = "identity"


@attrs.frozen
class Embedding:
    """An embedder's ending: pooling, Dense modules in order, then perhaps Normalize."""

    pooling: Pooling
    dense: tuple[Dense, ...] = ()
    normalize: bool = True


@attrs.frozen
class Classifier:
    """A sequence-classification head: ``out(norm(act(dense(pooled))))``.

    BERT's is its pooler (``tanh``) and ``classifier``; XLM-R's is
    ``classifier.dense`` (``tanh``) and ``classifier.out_proj``; ModernBERT's
    is ``head.dense`` (GELU) and ``head.norm`` on the CLS token or the mean,
    then ``classifier``. ``out_w`` has one column per label. An LLM
    reranker's is no dense layer and one column, ``w_yes - w_no`` (its
    language-model head's rows), on the last real token.
    """

    #: ``None``: no dense layer (nor activation) before ``out``
    dense_w: F32 | None
    dense_b: F32 | None
    activation: Activation
    out_w: F32  # (hidden, labels)
    out_b: F32
    #: the rows the head reads: the first token's vector, the masked mean or
    #: each row's last real token
    pooling: Literal["cls", "mean", "lasttoken"] = "cls"
    norm_g: F32 | None = None
    norm_b: F32 | None = None
    norm_eps: float = 1e-5


Ending = Embedding | Classifier


def activate(x: F32, activation: Activation) -> F32:
    if activation == "tanh":
        out: F32 = np.tanh(x)
        return out
    if activation == "gelu":
        return gelu(x)
    return x


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


def finish(ending: Ending, hidden: F32, mask: F32) -> F32:
    """Sentence vectors (rows, dims), or a classifier's logits (rows,) for one
    label and (rows, labels) for several."""
    if isinstance(ending, Classifier):
        return classify(ending, hidden, mask)
    pooled = pool(hidden, mask, ending.pooling)
    for dense in ending.dense:
        pooled = pooled @ dense.weight
        if dense.bias is not None:
            pooled += dense.bias
        pooled = activate(pooled, dense.activation)
    return l2_normalize(pooled) if ending.normalize else pooled.astype(np.float32, copy=False)


def classify(head: Classifier, hidden: F32, mask: F32) -> F32:
    x = pool(hidden, mask, head.pooling)
    if head.dense_w is not None:
        x = x @ head.dense_w
        if head.dense_b is not None:
            x += head.dense_b
        x = activate(x, head.activation)
    if head.norm_g is not None:
        x = layer_norm(x, head.norm_g, head.norm_b, head.norm_eps)
    logits: F32 = x @ head.out_w + head.out_b
    return logits[:, 0] if logits.shape[1] == 1 else logits
