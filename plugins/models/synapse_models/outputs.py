"""Several outputs of one forward pass: the body's token vectors computed
once (numpy, or an onnxruntime graph whose output is the last hidden state),
then each output asked for read from them: the dense vector (the folder's
pooling, Dense modules and Normalize), the sparse vector (SPLADE's or
bge-m3's head) and the token vectors (bge-m3's ColBERT head, else the last
hidden state of every token). See :mod:`synapse_models.token_heads`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import files, packing
from .folder import COLBERT_LINEAR, SPARSE_LINEAR, Layout, read_json
from .heads import Embedding, finish
from .token_heads import M3Heads, SpladeHead, colbert, last_hidden, m3_sparse, read_linear, splade
from .weights import F32, I64, LazyTensors, Tensors

OutputName = Literal["dense", "sparse", "multi"]
#: (ids, token types, mask, threads) -> the last hidden state (rows, width, hidden)
Hidden = Callable[[I64, I64, F32, int], F32]


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
    """What computes a folder's outputs from its body's token vectors."""

    def __init__(
        self, located: files.ModelFiles, layout: Layout, hidden: Hidden, ending: Embedding
    ) -> None:
        self.layout = layout
        self.hidden = hidden
        self.ending = ending
        self.splade: SpladeHead | None = None
        self.m3: M3Heads | None = None
        if layout.sparse == "splade":
            self.splade = splade_head(located)
        elif layout.sparse == "m3" or layout.colbert:
            self.m3 = m3_heads(located.root, layout)

    def compute(
        self, ids: I64, types: I64, mask: F32, threads: int, kinds: Sequence[OutputName]
    ) -> list[list[Any]]:
        """Each of ``kinds`` for the packed rows, from one pass of the body."""
        hidden = self.hidden(ids, types, mask, threads)
        out: list[list[Any]] = []
        for kind in kinds:
            if kind == "dense":
                out.append(list(finish(self.ending, hidden, mask)))
            elif kind == "sparse" and self.splade is not None:
                out.append(splade(self.splade, hidden, mask))
            elif kind == "sparse" and self.m3 is not None:
                out.append(m3_sparse(self.m3, hidden, mask, ids))
            elif kind == "multi" and self.m3 is not None and self.m3.colbert_w is not None:
                out.append(colbert(self.m3, hidden, mask))
            elif kind == "multi":
                out.append(last_hidden(hidden, mask))
            else:
                raise ValueError(f"the model has no {kind} output")
        return out


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
