"""What the post-LayerNorm encoders with rotary positions share (NomicBERT
and GTE v1.5): word (and token-type) embeddings with a layer norm and no
position table, and self-attention whose queries and keys are rotated
(rotate-half) before their scores, as ONNX. Each family keeps its own
feed-forward block (SwiGLU, gated GELU)."""

from __future__ import annotations

import numpy as np

from ..graph import Graph
from ..weights import F32


def embeddings_graph(
    g: Graph, word: F32, token_type: F32 | None, ln_g: F32, ln_b: F32, eps: float
) -> str:
    """(rows, width, hidden): the words' (and token types') vectors, normed."""
    x = g.op("Gather", g.const(word), "input_ids", axis=0)
    if token_type is not None:
        x = g.op("Add", x, g.op("Gather", g.const(token_type), "token_type_ids", axis=0))
    return g.layer_norm(x, ln_g, ln_b, eps)


class RotaryAttention:
    """Rotated self-attention over a batch, as ONNX: built once per graph
    (the cos and sin rows of the batch's width, the padding bias), then
    :meth:`attend` once per layer."""

    def __init__(self, g: Graph, cos: F32, sin: F32, heads: int, head: int, hidden: int) -> None:
        self.g = g
        width = g.width()
        self.cos = g.op("Slice", g.const(cos), g.i64(0), width, g.i64(0))
        self.sin = g.op("Slice", g.const(sin), g.i64(0), width, g.i64(0))
        self.bias = g.key_bias()
        self.head, self.hidden = head, hidden
        self.split_heads = g.i64(0, 0, heads, head)
        self.merge_heads = g.i64(0, 0, hidden)
        self.scale = g.f32(1.0 / float(np.sqrt(head)))

    def attend(self, x: str, qkv_w: F32, qkv_b: F32 | None) -> str:
        """(rows, width, hidden): the heads' contexts of ``x``, merged, before
        the output projection."""
        g, head, hidden = self.g, self.head, self.hidden
        qkv = g.linear(x, qkv_w, qkv_b)
        parts = g.ops("Split", [qkv, g.i64(hidden, hidden, hidden)], 3, axis=-1)
        q, k, v = (
            g.op("Transpose", g.op("Reshape", part, self.split_heads), perm=[0, 2, 1, 3])
            for part in parts
        )
        q, k = g.rotate(q, self.cos, self.sin, head), g.rotate(k, self.cos, self.sin, head)
        k = g.op("Transpose", k, perm=[0, 1, 3, 2])
        scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), self.scale), self.bias)
        probs = g.op("Softmax", scores, axis=-1)
        context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        return g.op("Reshape", context, self.merge_heads)
