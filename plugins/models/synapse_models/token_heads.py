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
read without torch). They run in numpy on the body's token vectors, which
numpy or onnxruntime computes (``Model.outputs``).
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
from .heads import activate, l2_normalize
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


def splade(head: SpladeHead, hidden: F32, mask: F32) -> list[Sparse]:
    """One SPLADE vector per row of ``hidden`` (rows, width, hidden)."""
    x = hidden @ head.dense_w + head.dense_b
    x = activate(x, head.activation)  # type: ignore[arg-type]
    x = layer_norm(x, head.norm_g, head.norm_b, head.norm_eps)
    logits = x @ head.decoder_w + head.decoder_b  # (rows, width, vocab)
    weights = np.log1p(np.maximum(logits, 0.0)) * mask[:, :, None]
    pooled = weights.max(axis=1)
    out: list[Sparse] = []
    for row in pooled:
        (nonzero,) = np.nonzero(row > 0)
        out.append((nonzero.tolist(), row[nonzero].astype(np.float32).tolist()))
    return out


def m3_sparse(heads: M3Heads, hidden: F32, mask: F32, ids: I64) -> list[Sparse]:
    """bge-m3's sparse weights per row: the largest of each token id's."""
    assert heads.sparse_w is not None and heads.sparse_b is not None
    weights = np.maximum(hidden @ heads.sparse_w + heads.sparse_b, 0.0)[:, :, 0]
    out: list[Sparse] = []
    for row_ids, row_weights, row_mask in zip(ids, weights, mask, strict=True):
        best: dict[int, float] = {}
        for token, weight, real in zip(
            row_ids.tolist(), row_weights.tolist(), row_mask.tolist(), strict=True
        ):
            if real and weight > 0 and token not in heads.special and weight > best.get(token, 0.0):
                best[token] = weight
        indices = sorted(best)
        out.append((indices, [best[i] for i in indices]))
    return out


def colbert(heads: M3Heads, hidden: F32, mask: F32) -> list[F32]:
    """bge-m3's ColBERT vectors per row: every real token's but the first, normalised."""
    assert heads.colbert_w is not None and heads.colbert_b is not None
    vectors = hidden[:, 1:] @ heads.colbert_w + heads.colbert_b
    counts = mask.sum(axis=1).astype(np.int64) - 1
    return [l2_normalize(np.ascontiguousarray(v[:n])) for v, n in zip(vectors, counts, strict=True)]


def last_hidden(hidden: F32, mask: F32) -> list[F32]:
    """Every real token's last hidden state, per row (TEI's ``/embed_all``)."""
    counts = mask.sum(axis=1).astype(np.int64)
    return [
        np.ascontiguousarray(h[:n], dtype=np.float32) for h, n in zip(hidden, counts, strict=True)
    ]


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
