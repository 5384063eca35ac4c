"""What BERT-style post-LayerNorm layers share, whatever their attention:
the fused query-key-value projection split into heads, and the layer's end
(attention output with its residual and norm, then the erf-GELU feed-forward
block with its residual and norm), in numpy and as ONNX. BERT, XLM-R and
MPNet (:mod:`.encoder`) and DeBERTa (:mod:`.deberta`) differ only in how
their attention scores are made."""

from __future__ import annotations

from typing import Protocol

from ..graph import Graph
from ..numerics import gelu, layer_norm
from ..weights import F32


class PostNormLayer(Protocol):
    """The weights of a post-LayerNorm layer, matrices as (in, out)."""

    @property
    def qkv_w(self) -> F32: ...
    @property
    def qkv_b(self) -> F32: ...
    @property
    def out_w(self) -> F32: ...
    @property
    def out_b(self) -> F32: ...
    @property
    def ln1_g(self) -> F32: ...
    @property
    def ln1_b(self) -> F32: ...
    @property
    def up_w(self) -> F32: ...
    @property
    def up_b(self) -> F32: ...
    @property
    def down_w(self) -> F32: ...
    @property
    def down_b(self) -> F32: ...
    @property
    def ln2_g(self) -> F32: ...
    @property
    def ln2_b(self) -> F32: ...


def layer_end(x: F32, context: F32, layer: PostNormLayer, eps: float) -> F32:
    """(positions, hidden): ``x`` after attention's ``context`` and the feed-forward block."""
    x = layer_norm(x + (context @ layer.out_w + layer.out_b), layer.ln1_g, layer.ln1_b, eps)
    up = gelu(x @ layer.up_w + layer.up_b)
    return layer_norm(x + (up @ layer.down_w + layer.down_b), layer.ln2_g, layer.ln2_b, eps)


def heads_graph(
    g: Graph,
    x: str,
    layer: PostNormLayer,
    hidden: int,
    split_heads: str,
    key_perm: tuple[int, ...] = (0, 2, 1, 3),
) -> tuple[str, str, str]:
    """Query, key and value, each (rows, heads, width, head); the key's axes
    as ``key_perm`` orders them ((0, 2, 3, 1): transposed for ``q @ k``)."""
    qkv = g.linear(x, layer.qkv_w, layer.qkv_b)
    parts = g.ops("Split", [qkv, g.i64(hidden, hidden, hidden)], 3, axis=-1)
    q, k, v = (g.op("Reshape", part, split_heads) for part in parts)
    heads = [0, 2, 1, 3]
    q, v = g.op("Transpose", q, perm=heads), g.op("Transpose", v, perm=heads)
    return q, g.op("Transpose", k, perm=list(key_perm)), v


def layer_end_graph(
    g: Graph, x: str, probs: str, v: str, merge_heads: str, layer: PostNormLayer, eps: float
) -> str:
    """:func:`layer_end` of the attention ``probs`` over ``v``, as ONNX."""
    context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    context = g.op("Reshape", context, merge_heads)
    attended = g.linear(context, layer.out_w, layer.out_b)
    x = g.layer_norm(g.op("Add", x, attended), layer.ln1_g, layer.ln1_b, eps)
    up = g.linear(x, layer.up_w, layer.up_b)
    down = g.linear(g.gelu(up), layer.down_w, layer.down_b)
    return g.layer_norm(g.op("Add", x, down), layer.ln2_g, layer.ln2_b, eps)
