"""Heads that read every token's vector, shared by every family: SPLADE's
masked-LM sparse vectors, and bge-m3's ``sparse_linear`` and
``colbert_linear`` heads.

- SPLADE (sentence-transformers' ``SparseEncoder``: ``MLMTransformer`` and
  ``SpladePooling``, max and ReLU): the masked-LM head's logits per token,
  ``log(1 + relu(logits))``, max-pooled over the real tokens; one weight per
  vocabulary entry, the zeros dropped.
- bge-m3 sparse (FlagEmbedding's ``M3Embedder``): ``relu(h @ w + b)`` per
  token, the largest weight of each token id kept, special tokens (cls, eos,
  pad, unk) and weights ≤ 0 dropped.
- bge-m3 ColBERT: ``h[1:] @ w + b`` for every real token but the first,
  each vector L2-normalised.

The heads' weights come from the folder (``model.safetensors`` for SPLADE's
``cls.predictions``, bge-m3's ``sparse_linear.pt`` and ``colbert_linear.pt``,
read without torch). Each head is cut in two: what reads the weights
(:func:`splade_pooled`, :func:`m3_token_weights`, :func:`colbert_vectors`:
computed here in numpy, or by the onnxruntime graph, which
:mod:`synapse_models.onnx_file` writes with the same heads as extra outputs),
and what turns those arrays into each row's output (:func:`splade_rows`,
:func:`m3_rows`, :func:`token_rows`: numpy on either runtime, no weights).
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from .errors import ModelFilesError
from .heads import activate
from .numerics import layer_norm
from .weights import F32, I64

#: a sparse vector: increasing indices and their weights
Sparse = tuple[list[int], list[float]]


@attrs.frozen
class SpladeHead:
    """A ``*ForMaskedLM`` head (BERT's ``cls.predictions``): dense, activation,
    LayerNorm, then the decoder (the word embeddings, tied) and its bias."""

    dense_w: F32  # (hidden, hidden)
    dense_b: F32
    activation: str
    norm_g: F32
    norm_b: F32
    norm_eps: float
    decoder_w: F32  # (hidden, vocab)
    decoder_b: F32


@attrs.frozen
class M3Heads:
    """bge-m3's extra heads: ``sparse_linear`` (hidden → 1), and
    ``colbert_linear`` (hidden → dims) when the folder has it."""

    sparse_w: F32 | None  # (hidden, 1)
    sparse_b: F32 | None
    colbert_w: F32 | None  # (hidden, dims)
    colbert_b: F32 | None
    #: the token ids the sparse output drops (cls, eos, pad, unk)
    special: frozenset[int] = frozenset()


def splade_pooled(head: SpladeHead, hidden: F32, mask: F32) -> F32:
    """(rows, vocab): each vocabulary entry's largest ``relu(logit)`` over a
    row's real tokens (``log1p`` is monotone: :func:`splade_rows` takes it
    of the pooled maxima, equal to pooling ``log1p(relu)``)."""
    x = hidden @ head.dense_w + head.dense_b
    x = activate(x, head.activation)  # type: ignore[arg-type]
    x = layer_norm(x, head.norm_g, head.norm_b, head.norm_eps)
    logits = x @ head.decoder_w + head.decoder_b  # (rows, width, vocab)
    pooled: F32 = (np.maximum(logits, 0.0) * mask[:, :, None]).max(axis=1)
    return pooled


def splade_rows(pooled: F32) -> list[Sparse]:
    """One SPLADE vector per row of :func:`splade_pooled`'s maxima: ``log1p``
    of the nonzero ones."""
    out: list[Sparse] = []
    for row in pooled:
        (nonzero,) = np.nonzero(row > 0)
        out.append((nonzero.tolist(), np.log1p(row[nonzero]).astype(np.float32).tolist()))
    return out


def splade(head: SpladeHead, hidden: F32, mask: F32) -> list[Sparse]:
    """One SPLADE vector per row of ``hidden`` (rows, width, hidden)."""
    return splade_rows(splade_pooled(head, hidden, mask))


def m3_token_weights(heads: M3Heads, hidden: F32) -> F32:
    """(rows, width): ``relu(h @ w + b)`` of every token (bge-m3's ``sparse_linear``)."""
    assert heads.sparse_w is not None and heads.sparse_b is not None
    weights: F32 = np.maximum(hidden @ heads.sparse_w + heads.sparse_b, 0.0)[:, :, 0]
    return weights


def m3_rows(weights: F32, mask: F32, ids: I64, special: frozenset[int]) -> list[Sparse]:
    """bge-m3's sparse vectors from :func:`m3_token_weights`: the largest
    weight of each token id, special tokens and zeros dropped."""
    out: list[Sparse] = []
    for row_ids, row_weights, row_mask in zip(ids, weights, mask, strict=True):
        best: dict[int, float] = {}
        for token, weight, real in zip(
            row_ids.tolist(), row_weights.tolist(), row_mask.tolist(), strict=True
        ):
            if real and weight > 0 and token not in special and weight > best.get(token, 0.0):
                best[token] = weight
        indices = sorted(best)
        out.append((indices, [best[i] for i in indices]))
    return out


def m3_sparse(heads: M3Heads, hidden: F32, mask: F32, ids: I64) -> list[Sparse]:
    """bge-m3's sparse weights per row: the largest of each token id's."""
    return m3_rows(m3_token_weights(heads, hidden), mask, ids, heads.special)


def colbert_vectors(heads: M3Heads, hidden: F32) -> F32:
    """(rows, width - 1, dims): ``h[1:] @ w + b`` of every token but the
    first, each L2-normalised (padding's too: :func:`token_rows` cuts them)."""
    assert heads.colbert_w is not None and heads.colbert_b is not None
    vectors = hidden[:, 1:] @ heads.colbert_w + heads.colbert_b
    norms = np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), np.float32(1e-12))
    out: F32 = (vectors / norms).astype(np.float32, copy=False)
    return out


def token_rows(vectors: F32, counts: I64) -> list[F32]:
    """Each row's first ``counts[row]`` token vectors (its real tokens)."""
    return [
        np.ascontiguousarray(v[:n], dtype=np.float32) for v, n in zip(vectors, counts, strict=True)
    ]


def colbert(heads: M3Heads, hidden: F32, mask: F32) -> list[F32]:
    """bge-m3's ColBERT vectors per row: every real token's but the first, normalised."""
    return token_rows(colbert_vectors(heads, hidden), mask.sum(axis=1).astype(np.int64) - 1)


def maxsim(query: F32, document: F32) -> float:
    """Late interaction of two rows of ColBERT vectors (normalised): each
    query token's largest cosine over the document's tokens, summed and
    divided by the query's token count, as FlagEmbedding's
    ``BGEM3FlagModel.colbert_score`` computes it."""
    return float((query @ document.T).max(axis=1).sum() / len(query))


def last_hidden(hidden: F32, mask: F32) -> list[F32]:
    """Every real token's last hidden state, per row (TEI's ``/embed_all``)."""
    return token_rows(hidden, mask.sum(axis=1).astype(np.int64))


def read_linear(path: Path) -> tuple[F32, F32]:
    """A ``torch.save(linear.state_dict())`` file's ``weight`` (as (in, out))
    and ``bias``, read without torch: the zip's pickle names each tensor's
    storage file, dtype, offset, size and stride."""
    try:
        state = _torch_state(path)
        weight, bias = state["weight"], state["bias"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, pickle.UnpicklingError) as exc:
        raise ModelFilesError(str(path), f"cannot read it as a torch Linear state: {exc}") from None
    return np.ascontiguousarray(weight.T), bias


_DTYPES = {"FloatStorage": np.float32, "HalfStorage": np.float16, "BFloat16Storage": None}


def _torch_state(path: Path) -> dict[str, F32]:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pkl = next(n for n in names if n.endswith("/data.pkl"))
        base = pkl[: -len("data.pkl")]

        class Unpickler(pickle.Unpickler):
            def find_class(self, module: str, name: str) -> Any:
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return _rebuild
                if (module, name) == ("collections", "OrderedDict"):
                    return dict
                if module == "torch" and name in _DTYPES and _DTYPES[name] is not None:
                    return name
                raise pickle.UnpicklingError(f"{module}.{name} is not a tensor's part")

            def persistent_load(self, pid: Any) -> Any:
                _, storage, key, _, _ = pid
                data = archive.read(f"{base}data/{key}")
                return np.frombuffer(data, dtype=_DTYPES[storage]).astype(np.float32)

        state = Unpickler(archive.open(pkl)).load()
    return {str(k): v for k, v in dict(state).items()}


def _rebuild(storage: F32, offset: int, size: Iterable[int], stride: Iterable[int], *_: Any) -> F32:
    size, stride = tuple(size), tuple(stride)
    count = 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) if size else 1
    flat = storage[offset : offset + count]
    return np.lib.stride_tricks.as_strided(
        flat, size, tuple(s * flat.itemsize for s in stride)
    ).copy()
