"""Several outputs of one forward pass: the body's token vectors computed
once, with every head asked for on them (numpy, or one run of the
onnxruntime graph, whose extra outputs are the last hidden state and the
token heads: :mod:`synapse_models.onnx_file`): the dense vector (the
folder's pooling, Dense modules and Normalize), the sparse vector (SPLADE's
or bge-m3's head) and the token vectors (bge-m3's ColBERT head, else the
last hidden state of every token). See :mod:`synapse_models.token_heads`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import files, packing
from .arranged import Weights
from .folder import COLBERT_LINEAR, SPARSE_LINEAR, Layout, read_json
from .heads import finish
from .token_heads import (
    M3Heads,
    SpladeHead,
    colbert_vectors,
    m3_rows,
    m3_token_weights,
    read_linear,
    splade_pooled,
    splade_rows,
    token_rows,
)
from .weights import F32, I64, LazyTensors, Tensors

OutputName = Literal["dense", "sparse", "multi"]
#: what a runtime computes in one pass, by name: ``output`` (the dense
#: vectors), ``hidden`` (the last hidden state, (rows, width, hidden)),
#: ``sparse`` (SPLADE's pooled maxima (rows, vocab), or bge-m3's token
#: weights (rows, width)), ``colbert`` ((rows, width - 1, dims), normalised)
RawName = Literal["output", "hidden", "sparse", "colbert"]
#: (ids, token types, mask, threads, names) -> those arrays, from one pass
Raw = Callable[[I64, I64, F32, int, Sequence[RawName]], list[F32]]


def offered(layout: Layout) -> dict[OutputName, int]:
    """The outputs a folder's model computes and their widths (sparse: the
    vocabulary's size, filled in by :func:`widths`)."""
    found: dict[OutputName, int] = {}
    if not layout.cross_encoder and layout.sparse != "splade":
        found["dense"] = layout.dims
    if layout.sparse is not None:
        found["sparse"] = 0
    if not layout.cross_encoder:
        found["multi"] = layout.hidden  # a ColBERT head's width is checked when it is read
    return found


class TokenOutputs:
    """What turns one pass's arrays (:data:`Raw`, numpy's or the onnxruntime
    graph's) into each row's outputs; holds no weights."""

    def __init__(self, layout: Layout, raw: Raw, special: frozenset[int] = frozenset()) -> None:
        self.layout = layout
        self.raw = raw
        #: the token ids bge-m3's sparse output drops
        self.special = special

    def names(self, kinds: Sequence[OutputName]) -> list[RawName]:
        """What the runtime computes for ``kinds``, in order, once each."""
        names: list[RawName] = []
        for kind in kinds:
            name: RawName
            if kind == "dense" and "dense" in offered(self.layout):
                name = "output"
            elif kind == "sparse" and self.layout.sparse is not None:
                name = "sparse"
            elif kind == "multi" and not self.layout.cross_encoder:
                name = "colbert" if self.layout.colbert else "hidden"
            else:
                raise ValueError(f"the model has no {kind} output")
            if name not in names:
                names.append(name)
        return names

    def compute(
        self, ids: I64, types: I64, mask: F32, threads: int, kinds: Sequence[OutputName]
    ) -> list[list[Any]]:
        """Each of ``kinds`` for the packed rows, from one pass of the body."""
        names = self.names(kinds)
        arrays = dict(zip(names, self.raw(ids, types, mask, threads, names), strict=True))
        counts = mask.sum(axis=1).astype(np.int64)
        out: list[list[Any]] = []
        for kind in kinds:
            if kind == "dense":
                out.append(list(arrays["output"]))
            elif kind == "sparse" and self.layout.sparse == "splade":
                out.append(splade_rows(arrays["sparse"]))
            elif kind == "sparse":
                out.append(m3_rows(arrays["sparse"], mask, ids, self.special))
            elif self.layout.colbert:
                out.append(token_rows(arrays["colbert"], counts - 1))
            else:
                out.append(token_rows(arrays["hidden"], counts))
        return out


def numpy_raw(
    weights: Weights, ids: I64, types: I64, mask: F32, names: Sequence[RawName]
) -> list[F32]:
    """:data:`Raw` in numpy, from ``weights`` (the body's and the token heads')."""
    hidden = weights.family.hidden_states(weights.body, ids, types, mask)
    tokens = weights.tokens
    out: list[F32] = []
    for name in names:
        if name == "output":
            out.append(finish(weights.ending, hidden, mask))
        elif name == "hidden":
            out.append(hidden)
        elif name == "sparse" and isinstance(tokens, SpladeHead):
            out.append(splade_pooled(tokens, hidden, mask))
        elif name == "sparse" and isinstance(tokens, M3Heads):
            out.append(m3_token_weights(tokens, hidden))
        elif name == "colbert" and isinstance(tokens, M3Heads):
            out.append(colbert_vectors(tokens, hidden))
        else:
            raise ValueError(f"the model computes no {name}")
    return out


def token_heads(located: files.ModelFiles, layout: Layout) -> SpladeHead | M3Heads | None:
    """The folder's token heads (:mod:`.token_heads`), if it has any."""
    if layout.sparse == "splade":
        return splade_head(located)
    if layout.sparse == "m3" or layout.colbert:
        return m3_heads(located.root, layout)
    return None


def splade_head(located: files.ModelFiles) -> SpladeHead:
    """BERT's masked-LM head (``cls.predictions``), its decoder tied to the word embeddings."""
    config = read_json(located.config)
    source = str(located.weights)
    tensors = Tensors(LazyTensors(located.weights), source, "masked-LM head")
    dense_w, dense_b = tensors.linear("cls.predictions.transform.dense")
    decoder = (
        tensors.matrix("cls.predictions.decoder.weight")
        if tensors.has("cls.predictions.decoder.weight")
        else np.ascontiguousarray(tensors.get("bert.embeddings.word_embeddings.weight").T)
    )
    return SpladeHead(
        dense_w,
        dense_b,
        str(config.get("hidden_act", "gelu")),
        tensors.get("cls.predictions.transform.LayerNorm.weight"),
        tensors.get("cls.predictions.transform.LayerNorm.bias"),
        float(config.get("layer_norm_eps", 1e-12)),
        decoder,
        tensors.get("cls.predictions.bias"),
    )


def m3_heads(root: Path, layout: Layout) -> M3Heads:
    """bge-m3's ``sparse_linear.pt`` and ``colbert_linear.pt``, and the special
    tokens its sparse output drops."""
    sw, sb = read_linear(root / SPARSE_LINEAR) if layout.sparse == "m3" else (None, None)
    cw, cb = read_linear(root / COLBERT_LINEAR) if layout.colbert else (None, None)
    return M3Heads(sw, sb, cw, cb, special_ids(root))


def special_ids(root: Path) -> frozenset[int]:
    """The ids of the cls, eos, pad and unk tokens (``special_tokens_map.json``)."""
    import json

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    path = root / "special_tokens_map.json"
    named = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    ids = set()
    for key in ("cls_token", "eos_token", "pad_token", "unk_token"):
        token = named.get(key)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and (found := tokenizer.token_to_id(token)) is not None:
            ids.add(found)
    return frozenset(ids)


def run_outputs(
    token: TokenOutputs,
    sequences: Sequence[Sequence[int]],
    framing: packing.Framing,
    slices: list[list[int]],
    threads: int,
    kinds: Sequence[OutputName],
) -> list[list[Any]]:
    """Each of ``kinds`` for ``sequences``, slice by slice, in input order."""
    out: list[list[Any]] = [[None] * len(sequences) for _ in kinds]
    for chunk in slices:
        packed = packing.pack([sequences[i] for i in chunk], framing)
        for rows, computed in zip(out, token.compute(*packed, threads, kinds), strict=True):
            for index, row in zip(chunk, computed, strict=True):
                rows[index] = row
    return out
