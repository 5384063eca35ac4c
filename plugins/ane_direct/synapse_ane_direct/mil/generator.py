"""MiniLM (a BERT sentence encoder) as one MIL program per sequence bucket.

Pure Python and deterministic: the text depends only on the bucket, the data
type and the encoder's config, never on weight values, so a golden copy stays
small and stable. Weights are ``BLOBFILE`` constants named by offset into the
weight file (:mod:`.blob`), built from the safetensors tensors at compile time.

The layout follows Apple's ml-ane-transformers ("Deploying Transformers on the
Apple Neural Engine"): activations are channels-first ``[1, C, 1, S]``, every
linear layer is a 1x1 ``conv``, layer norm runs over the channel axis, and the
attention heads are split into separate tensors so each head's matmuls are
small. The host looks up the word-piece embeddings (a gather, kept off the
engine); the program adds position and token-type embeddings and does the
rest, including mean pooling over the mask and L2 normalisation.

Inputs: ``x`` ``[1, C, 1, S]`` (word embeddings, zeros past the text) and
``mask`` ``[1, 1, 1, S]`` (1 for a token, 0 for padding). Output:
``embedding`` ``[1, 1, 1, C]``, laid along the last axis so the vector is one
contiguous row of the output buffer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from . import blob
from .program import WEIGHTS_PATH, DType, Program, TensorSpec, WeightRef

#: MIL language version and target of the generated text (the ones public
#: Neural Engine projects compile with the in-memory model descriptor).
MIL_VERSION = "1.3"
MIL_TARGET = "ios17"
BUILD_INFO = (
    '[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
    '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
    '{"coremltools-version", "9.0"}})]'
)
#: Taken off the attention scores of padding positions (exp of -10000 is 0 in fp16 too).
MASK_PENALTY = 10000.0
#: fp16 cannot hold BERT's 1e-12; this is far below any real variance.
FP16_LAYER_NORM_EPS = 1e-5
NORM_EPS = 1e-12

Array = npt.NDArray[Any]


class EncoderShape(Protocol):
    """The numbers of a BERT encoder the text depends on (e.g. ``model_files.BertConfig``)."""

    @property
    def hidden(self) -> int: ...
    @property
    def heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def layers(self) -> int: ...
    @property
    def intermediate(self) -> int: ...
    @property
    def max_positions(self) -> int: ...
    @property
    def layer_norm_eps(self) -> float: ...


def _float_literal(value: float, dtype: DType) -> str:
    """Exact, as a hex float with no trailing zeros (``fp16(0x1.6ap-3)``)."""
    exact = float(np.float16(value)) if dtype == "fp16" else float(np.float32(value))
    mantissa, exponent = exact.hex().split("p")
    return f"{dtype}({mantissa.rstrip('0').rstrip('.')}p{exponent})"


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


class _Emitter:
    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype
        self.lines: list[str] = []
        self.weights: list[WeightRef] = []
        self._next_offset = blob.ALIGN
        self._names: set[str] = set()

    def _claim(self, name: str) -> str:
        if name in self._names:
            raise ValueError(f"generator bug: {name!r} defined twice")
        self._names.add(name)
        return name

    def tensor_type(self, shape: tuple[int, ...]) -> str:
        return f"tensor<{self.dtype}, {_shape(shape)}>"

    def const(self, name: str, mil_type: str, literal: str) -> str:
        self._claim(name)
        self.lines.append(f'{mil_type} {name} = const()[name = string("{name}"), val = {literal}];')
        return name

    def ints(self, name: str, values: tuple[int, ...]) -> str:
        t = f"tensor<int32, [{len(values)}]>"
        return self.const(name, t, f"{t}({_shape(values)})")

    def scalar(self, name: str, value: float) -> str:
        return self.const(name, self.dtype, _float_literal(value, self.dtype))

    def weight(self, name: str, source: str, transform: str, shape: tuple[int, ...]) -> str:
        offset = self._next_offset
        size = int(np.prod(shape)) * blob.itemsize(self.dtype)
        self._next_offset = blob.after(offset, size)
        self.weights.append(WeightRef(name, source, transform, shape, offset))
        t = self.tensor_type(shape)
        literal = f'{t}(BLOBFILE(path = string("{WEIGHTS_PATH}"), offset = uint64({offset})))'
        return self.const(name, t, literal)

    def op(
        self, out: str, out_shape: tuple[int, ...], op: str, /, **args: str | tuple[str, ...]
    ) -> str:
        self._claim(out)
        t = self.tensor_type(out_shape)
        self.lines.append(f'{t} {out} = {op}({_args(args)})[name = string("{out}")];')
        return out

    def multi(self, outs: list[str], shape: tuple[int, ...], op: str, /, **args: str) -> list[str]:
        for out in outs:
            self._claim(out)
        lhs = ", ".join(f"{self.tensor_type(shape)} {out}" for out in outs)
        self.lines.append(f'{lhs} = {op}({_args(args)})[name = string("{outs[0]}")];')
        return outs


def _args(args: Mapping[str, str | tuple[str, ...]]) -> str:
    parts = []
    for key in sorted(args):
        value = args[key]
        parts.append(
            f"{key} = ({', '.join(value)})" if isinstance(value, tuple) else f"{key} = {value}"
        )
    return ", ".join(parts)


def generate(bucket: int, dtype: DType, config: EncoderShape) -> Program:
    """The MIL program computing ``config``'s sentence embedding for ``bucket`` tokens."""
    if not 0 < bucket <= config.max_positions:
        raise ValueError(f"bucket {bucket} must be within 1..{config.max_positions} positions")
    C, S, H, D = config.hidden, bucket, config.heads, config.head_dim
    e = _Emitter(dtype)
    act = (1, C, 1, S)

    # Shared parameters.
    e.const("conv_pad_type", "string", 'string("valid")')
    e.ints("conv_strides", (1, 1))
    e.ints("conv_pad", (0, 0, 0, 0))
    e.ints("conv_dilations", (1, 1))
    e.const("conv_groups", "int32", "int32(1)")
    e.ints("axis_channels", (1,))
    e.ints("axis_positions", (3,))
    e.const("axis_c", "int32", "int32(1)")
    e.const("axis_last", "int32", "int32(-1)")
    e.const("yes", "bool", "bool(true)")
    e.const("no", "bool", "bool(false)")
    e.const("gelu_mode", "string", 'string("EXACT")')
    e.const("heads", "int32", f"int32({H})")
    eps = (
        config.layer_norm_eps
        if dtype == "fp32"
        else max(config.layer_norm_eps, FP16_LAYER_NORM_EPS)
    )
    e.scalar("ln_eps", eps)
    e.scalar("one", 1.0)
    e.scalar("mask_penalty", MASK_PENALTY)
    e.scalar("attn_scale", 1.0 / float(np.sqrt(D)))
    e.scalar("norm_eps", NORM_EPS if dtype == "fp32" else float(np.finfo(np.float16).tiny))
    e.ints("head_shape", (1, D, S))
    e.ints("head_shape4", (1, D, 1, S))
    e.ints("bias_shape", (1, 1, S))
    e.ints("out_shape", (1, 1, 1, C))
    conv = {
        "dilations": "conv_dilations",
        "groups": "conv_groups",
        "pad": "conv_pad",
        "pad_type": "conv_pad_type",
        "strides": "conv_strides",
    }

    def linear(out: str, x: str, prefix: str, n_out: int, n_in: int, shape_s: int = S) -> str:
        w = e.weight(f"{out}_w", f"{prefix}.weight", "conv", (n_out, n_in, 1, 1))
        b = e.weight(f"{out}_b", f"{prefix}.bias", "", (n_out,))
        return e.op(out, (1, n_out, 1, shape_s), "conv", **conv, weight=w, bias=b, x=x)

    def layer_norm(out: str, x: str, prefix: str) -> str:
        g = e.weight(f"{out}_g", f"{prefix}.weight", "", (C,))
        b = e.weight(f"{out}_b", f"{prefix}.bias", "", (C,))
        return e.op(
            out, act, "layer_norm", axes="axis_channels", beta=b, epsilon="ln_eps", gamma=g, x=x
        )

    # Embeddings: word pieces (input) + positions + token type 0, then layer norm.
    pos = e.weight("emb_pos", "embeddings.position_embeddings.weight", "positions", act)
    typ = e.weight("emb_type", "embeddings.token_type_embeddings.weight", "type0", (1, C, 1, 1))
    h = e.op("emb_sum", act, "add", x="x", y=pos)
    h = e.op("emb_typed", act, "add", x=h, y=typ)
    h = layer_norm("emb_ln", h, "embeddings.LayerNorm")

    # Padding positions get a large negative attention score: (mask - 1) * penalty.
    e.op("mask_off", (1, 1, 1, S), "sub", x="mask", y="one")
    e.op("mask_bias4", (1, 1, 1, S), "mul", x="mask_off", y="mask_penalty")
    bias = e.op("mask_bias", (1, 1, S), "reshape", shape="bias_shape", x="mask_bias4")

    for i in range(config.layers):
        p, n = f"encoder.layer.{i}", f"l{i}"
        q = linear(f"{n}_q", h, f"{p}.attention.self.query", C, C)
        q = e.op(f"{n}_qs", act, "mul", x=q, y="attn_scale")
        k = linear(f"{n}_k", h, f"{p}.attention.self.key", C, C)
        v = linear(f"{n}_v", h, f"{p}.attention.self.value", C, C)
        split = {}
        for tag, src in (("q", q), ("k", k), ("v", v)):
            outs = [f"{n}_{tag}_h{j}" for j in range(H)]
            split[tag] = e.multi(
                outs, (1, D, 1, S), "split", axis="axis_c", num_splits="heads", x=src
            )
        contexts = []
        for j in range(H):
            hq = e.op(f"{n}_h{j}_q", (1, D, S), "reshape", shape="head_shape", x=split["q"][j])
            hk = e.op(f"{n}_h{j}_k", (1, D, S), "reshape", shape="head_shape", x=split["k"][j])
            hv = e.op(f"{n}_h{j}_v", (1, D, S), "reshape", shape="head_shape", x=split["v"][j])
            # scores[q, k] = sum_d q[d, q] k[d, k]
            s = e.op(
                f"{n}_h{j}_scores",
                (1, S, S),
                "matmul",
                transpose_x="yes",
                transpose_y="no",
                x=hq,
                y=hk,
            )
            s = e.op(f"{n}_h{j}_masked", (1, S, S), "add", x=s, y=bias)
            w = e.op(f"{n}_h{j}_weights", (1, S, S), "softmax", axis="axis_last", x=s)
            # context[d, q] = sum_k v[d, k] weights[q, k]
            c = e.op(
                f"{n}_h{j}_context",
                (1, D, S),
                "matmul",
                transpose_x="no",
                transpose_y="yes",
                x=hv,
                y=w,
            )
            contexts.append(
                e.op(f"{n}_h{j}_out", (1, D, 1, S), "reshape", shape="head_shape4", x=c)
            )
        ctx = e.op(
            f"{n}_context", act, "concat", axis="axis_c", interleave="no", values=tuple(contexts)
        )
        a = linear(f"{n}_attn", ctx, f"{p}.attention.output.dense", C, C)
        a = e.op(f"{n}_attn_res", act, "add", x=h, y=a)
        a = layer_norm(f"{n}_attn_ln", a, f"{p}.attention.output.LayerNorm")
        f = linear(f"{n}_ffn_up", a, f"{p}.intermediate.dense", config.intermediate, C)
        f = e.op(f"{n}_ffn_gelu", (1, config.intermediate, 1, S), "gelu", mode="gelu_mode", x=f)
        f = linear(f"{n}_ffn_down", f, f"{p}.output.dense", C, config.intermediate)
        f = e.op(f"{n}_ffn_res", act, "add", x=a, y=f)
        h = layer_norm(f"{n}_out", f, f"{p}.output.LayerNorm")

    # Mean over the mask's positions, then L2 normalisation.
    pooled = (1, C, 1, 1)
    m = e.op("pool_masked", act, "mul", x=h, y="mask")
    m = e.op("pool_sum", pooled, "reduce_sum", axes="axis_positions", keep_dims="yes", x=m)
    count = e.op(
        "pool_count", (1, 1, 1, 1), "reduce_sum", axes="axis_positions", keep_dims="yes", x="mask"
    )
    mean = e.op("pool_mean", pooled, "real_div", x=m, y=count)
    sq = e.op("norm_sq", pooled, "mul", x=mean, y=mean)
    ss = e.op("norm_sum", (1, 1, 1, 1), "reduce_sum", axes="axis_channels", keep_dims="yes", x=sq)
    inv = e.op("norm_inv", (1, 1, 1, 1), "rsqrt", epsilon="norm_eps", x=ss)
    y = e.op("normalised", pooled, "mul", x=mean, y=inv)
    e.op("embedding", (1, 1, 1, C), "reshape", shape="out_shape", x=y)

    inputs = (TensorSpec("x", dtype, act), TensorSpec("mask", dtype, (1, 1, 1, S)))
    output = TensorSpec("embedding", dtype, (1, 1, 1, C))
    signature = ", ".join(f"{e.tensor_type(t.shape)} {t.name}" for t in inputs)
    body = "\n".join("        " + line for line in e.lines)
    text = (
        f"program({MIL_VERSION})\n{BUILD_INFO}\n{{\n"
        f"    func main<{MIL_TARGET}>({signature}) {{\n{body}\n"
        f"    }} -> ({output.name});\n}}\n"
    )
    return Program(bucket, dtype, text, inputs, output, tuple(e.weights))


# -- weights ---------------------------------------------------------------------

_TRANSFORMS: dict[str, Callable[[Array, tuple[int, ...]], Array]] = {
    "": lambda t, shape: t.reshape(shape),
    "conv": lambda t, shape: t.reshape(shape),
    # rows 0..S-1 of the [positions, C] table, channels first
    "positions": lambda t, shape: t[: shape[3]].T.reshape(shape),
    # token type 0 (a single-sentence input)
    "type0": lambda t, shape: t[0].reshape(shape),
}


def weight_array(ref: WeightRef, tensors: Mapping[str, Array]) -> Array:
    """The fp32 values of ``ref``, from the model's safetensors tensors."""
    try:
        source = tensors[ref.source]
    except KeyError:
        raise ValueError(f"weight {ref.name}: the model has no tensor {ref.source!r}") from None
    try:
        return np.asarray(_TRANSFORMS[ref.transform](source, ref.shape), dtype=np.float32)
    except ValueError as exc:
        raise ValueError(
            f"weight {ref.name}: tensor {ref.source!r} of shape {list(source.shape)} does not "
            f"give {list(ref.shape)} ({exc})"
        ) from None


def weight_file(program: Program, tensors: Mapping[str, Array]) -> bytes:
    """The weight file ``program``'s BLOBFILE constants point into."""
    return blob.build(
        ((r.offset, weight_array(r, tensors)) for r in program.weights), program.dtype
    )
