"""A numpy interpreter for exactly the MIL operations the generator writes.

It proves, off the Neural Engine, that a generated program computes what it
should: every variable's declared type and shape is checked against what the
operation produced, an operation or argument it does not know fails the load,
and a non-finite value (an fp16 overflow, say) fails the run, naming the line.

fp16 programs are run the way the engine stores them: every tensor is rounded
to float16 after each operation, while the arithmetic inside one operation is
done in float32. fp32 programs run in float32 throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from . import blob
from .parser import Blobfile, Function, MilType, Scalar, Statement, parse

Array = npt.NDArray[Any]
Value = Array | int | bool | str | tuple[int, ...]
_FLOATS: dict[str, np.dtype[Any]] = {"fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32)}


class InterpreterError(ValueError):
    """The program is not one this interpreter can run, or it went wrong; names the line."""


def _f32(value: Value) -> Array:
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        raise TypeError(f"expected a float tensor, got {type(value).__name__}")
    return value.astype(np.float32, copy=False)


def _ints(value: Value) -> tuple[int, ...]:
    if not isinstance(value, tuple):
        raise TypeError("expected an int32 vector")
    return value


def _int(value: Value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("expected an int32 scalar")
    return value


def _bool(value: Value) -> bool:
    if not isinstance(value, bool):
        raise TypeError("expected a bool")
    return value


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} outside rank {rank}")
    return axis % rank


def _erf(x: Array) -> Array:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and
    # scipy is not a dependency.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return np.asarray(sign * (1.0 - poly * np.exp(-a * a)), dtype=np.float32)


# -- operations: each takes its named arguments, returns its output tensors ----------


def _binary(fn: Callable[[Array, Array], Array]) -> Callable[..., list[Array]]:
    return lambda x, y: [fn(_f32(x), _f32(y))]


def _conv(
    x: Value,
    weight: Value,
    strides: Value,
    pad_type: Value,
    pad: Value,
    dilations: Value,
    groups: Value,
    bias: Value | None = None,
) -> list[Array]:
    xs, w = _f32(x), _f32(weight)
    if _ints(strides) != (1, 1) or _ints(dilations) != (1, 1) or _int(groups) != 1:
        raise ValueError("only 1x1 convolutions with stride 1, dilation 1, one group")
    if pad_type != "valid" or any(_ints(pad)):
        raise ValueError("only valid (unpadded) convolutions")
    if xs.ndim != 4 or w.ndim != 4 or w.shape[2:] != (1, 1) or w.shape[1] != xs.shape[1]:
        raise ValueError(
            f"weight {list(w.shape)} does not fit input {list(xs.shape)} as a 1x1 conv"
        )
    b, c, h, s = xs.shape
    out = np.matmul(w[:, :, 0, 0], xs.reshape(b, c, h * s)).reshape(b, w.shape[0], h, s)
    if bias is not None:
        bs = _f32(bias)
        if bs.shape != (w.shape[0],):
            raise ValueError(f"bias {list(bs.shape)} for {w.shape[0]} output channels")
        out = out + bs[None, :, None, None]
    return [out]


def _split(x: Value, axis: Value, num_splits: Value) -> list[Array]:
    xs = _f32(x)
    ax, n = _axis(_int(axis), xs.ndim), _int(num_splits)
    if n <= 0 or xs.shape[ax] % n:
        raise ValueError(f"axis of {xs.shape[ax]} does not split into {n}")
    return list(np.split(xs, n, axis=ax))


def _reshape(x: Value, shape: Value) -> list[Array]:
    xs, target = _f32(x), _ints(shape)
    if int(np.prod(target)) != xs.size:
        raise ValueError(f"cannot reshape {list(xs.shape)} to {list(target)}")
    return [xs.reshape(target)]


def _matmul(x: Value, y: Value, transpose_x: Value, transpose_y: Value) -> list[Array]:
    a, b = _f32(x), _f32(y)
    # Contiguous copies: numpy's batched matmul over swapped axes skips BLAS.
    if _bool(transpose_x):
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    if _bool(transpose_y):
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul of {list(a.shape)} by {list(b.shape)}")
    return [np.matmul(a, b)]


def _softmax(x: Value, axis: Value) -> list[Array]:
    xs = _f32(x)
    ax = _axis(_int(axis), xs.ndim)
    e = np.exp(xs - xs.max(axis=ax, keepdims=True))
    return [e / e.sum(axis=ax, keepdims=True)]


def _concat(values: tuple[Value, ...], axis: Value, interleave: Value) -> list[Array]:
    if _bool(interleave):
        raise ValueError("interleaved concat is not generated")
    parts = [_f32(v) for v in values]
    return [np.concatenate(parts, axis=_axis(_int(axis), parts[0].ndim))]


def _layer_norm(x: Value, axes: Value, gamma: Value, beta: Value, epsilon: Value) -> list[Array]:
    xs = _f32(x)
    ax = tuple(_axis(a, xs.ndim) for a in _ints(axes))
    normal = tuple(xs.shape[a] for a in ax)
    keep = [xs.shape[i] if i in ax else 1 for i in range(xs.ndim)]
    g, b = _f32(gamma), _f32(beta)
    if g.shape != normal or b.shape != normal:
        raise ValueError(f"gamma {list(g.shape)} / beta {list(b.shape)} for axes of {list(normal)}")
    mean = xs.mean(axis=ax, keepdims=True)
    var = np.square(xs - mean).mean(axis=ax, keepdims=True)
    eps = float(_f32(epsilon))
    return [(xs - mean) / np.sqrt(var + eps) * g.reshape(keep) + b.reshape(keep)]


def _gelu(x: Value, mode: Value) -> list[Array]:
    if mode != "EXACT":
        raise ValueError(f"gelu mode {mode!r} is not generated")
    xs = _f32(x)
    return [0.5 * xs * (1.0 + _erf(xs / np.float32(np.sqrt(2.0))))]


def _reduce_sum(x: Value, axes: Value, keep_dims: Value) -> list[Array]:
    xs = _f32(x)
    ax = tuple(_axis(a, xs.ndim) for a in _ints(axes))
    return [xs.sum(axis=ax, keepdims=_bool(keep_dims))]


def _rsqrt(x: Value, epsilon: Value) -> list[Array]:
    return [1.0 / np.sqrt(_f32(x) + _f32(epsilon))]


OPS: dict[str, Callable[..., list[Array]]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "real_div": _binary(np.divide),
    "conv": _conv,
    "split": _split,
    "reshape": _reshape,
    "matmul": _matmul,
    "softmax": _softmax,
    "concat": _concat,
    "layer_norm": _layer_norm,
    "gelu": _gelu,
    "reduce_sum": _reduce_sum,
    "rsqrt": _rsqrt,
}
#: Arguments each operation takes (all required but conv's bias).
ARGS: dict[str, frozenset[str]] = {
    "add": frozenset({"x", "y"}),
    "sub": frozenset({"x", "y"}),
    "mul": frozenset({"x", "y"}),
    "real_div": frozenset({"x", "y"}),
    "conv": frozenset({"x", "weight", "bias", "strides", "pad_type", "pad", "dilations", "groups"}),
    "split": frozenset({"x", "axis", "num_splits"}),
    "reshape": frozenset({"x", "shape"}),
    "matmul": frozenset({"x", "y", "transpose_x", "transpose_y"}),
    "softmax": frozenset({"x", "axis"}),
    "concat": frozenset({"values", "axis", "interleave"}),
    "layer_norm": frozenset({"x", "axes", "gamma", "beta", "epsilon"}),
    "gelu": frozenset({"x", "mode"}),
    "reduce_sum": frozenset({"x", "axes", "keep_dims"}),
    "rsqrt": frozenset({"x", "epsilon"}),
}
OPTIONAL = {"conv": frozenset({"bias"})}


@attrs.frozen
class _Step:
    statement: Statement
    run: Callable[..., list[Array]]


class Interpreter:
    """A loaded program: constants bound, operations checked; :meth:`run` evaluates it.

    ``weights`` maps each ``BLOBFILE`` path to the file's bytes.
    """

    def __init__(self, text: str, weights: Mapping[str, bytes]) -> None:
        self.function: Function = parse(text)
        readers = {path: blob.reader(data) for path, data in weights.items()}
        self.constants: dict[str, Value] = {}
        self.types: dict[str, MilType] = {}
        self._steps: list[_Step] = []
        for mil_type, name in self.function.inputs:
            self._declare(name, mil_type, 0)
        for st in self.function.body:
            for mil_type, name in st.outputs:
                self._declare(name, mil_type, st.line)
            if st.op == "const":
                value = self._literal(st, readers)
                self._check(st.outputs[0][0], st.outputs[0][1], value, st.line)
                # Widened once here rather than by every operation of every run:
                # the values are still exactly the declared type's.
                if isinstance(value, np.ndarray):
                    value = value.astype(np.float32)
                self.constants[st.outputs[0][1]] = value
                continue
            self._steps.append(_Step(st, self._bind(st)))
        for name in self.function.outputs:
            if name not in self.types:
                raise InterpreterError(f"the function returns {name!r}, which is never defined")

    def _declare(self, name: str, mil_type: MilType, line: int) -> None:
        if name in self.types:
            raise InterpreterError(f"MIL line {line}: {name!r} is defined twice")
        self.types[name] = mil_type

    def _bind(self, st: Statement) -> Callable[..., list[Array]]:
        fn = OPS.get(st.op)
        if fn is None:
            raise InterpreterError(f"MIL line {st.line}: unknown operation {st.op!r}")
        given, allowed = set(st.args), ARGS[st.op]
        missing = allowed - OPTIONAL.get(st.op, frozenset()) - given
        if given - allowed or missing:
            raise InterpreterError(
                f"MIL line {st.line}: {st.op} takes {sorted(allowed)}; unknown "
                f"{sorted(given - allowed)}, missing {sorted(missing)}"
            )
        for ref in st.args.values():
            for name in (ref,) if isinstance(ref, str) else ref:
                if name not in self.types:
                    raise InterpreterError(
                        f"MIL line {st.line}: {name!r} is not defined before use"
                    )
        return fn

    def _literal(self, st: Statement, readers: Mapping[str, Callable[..., Array]]) -> Value:
        mil_type, value = st.outputs[0][0], st.value
        if isinstance(value, Blobfile):
            read = readers.get(value.path)
            if read is None or mil_type.dtype not in _FLOATS or mil_type.shape is None:
                raise InterpreterError(f"MIL line {st.line}: no {mil_type} in {value.path!r}")
            try:
                return read(value.offset, mil_type.dtype, mil_type.shape)
            except blob.BlobError as exc:
                raise InterpreterError(f"MIL line {st.line}: {exc}") from None
        if isinstance(value, tuple):
            return value
        if isinstance(value, Scalar) and value.dtype == mil_type.dtype and mil_type.shape is None:
            if value.dtype in _FLOATS:
                return np.asarray(float(value.value), dtype=_FLOATS[value.dtype])
            if not isinstance(value.value, float):
                return value.value
        raise InterpreterError(f"MIL line {st.line}: a {mil_type} const cannot hold {value!r}")

    def _check(self, mil_type: MilType, name: str, value: Value, line: int) -> None:
        where = f"MIL line {line}: {name}"
        if mil_type.dtype in _FLOATS:
            if not isinstance(value, np.ndarray) or value.dtype != _FLOATS[mil_type.dtype]:
                raise InterpreterError(f"{where} is declared {mil_type}, got {_describe(value)}")
            shape = mil_type.shape if mil_type.shape is not None else ()
            if value.shape != shape:
                raise InterpreterError(
                    f"{where} is declared {mil_type}, got shape {list(value.shape)}"
                )
            if not np.isfinite(value).all():
                raise InterpreterError(f"{where} has non-finite values in {mil_type.dtype}")
        elif mil_type.shape is not None and (
            not isinstance(value, tuple) or (len(value),) != mil_type.shape
        ):
            raise InterpreterError(f"{where} is declared {mil_type}, got {value!r}")

    def run(self, inputs: Mapping[str, Array]) -> dict[str, Array]:
        env: dict[str, Value] = dict(self.constants)
        names = [name for _, name in self.function.inputs]
        if set(inputs) != set(names):
            raise InterpreterError(f"inputs are {sorted(names)}, given {sorted(inputs)}")
        for mil_type, name in self.function.inputs:
            self._check(mil_type, name, inputs[name], 0)
            env[name] = inputs[name]
        for step in self._steps:
            st = step.statement
            args = {
                k: env[v] if isinstance(v, str) else tuple(env[n] for n in v)
                for k, v in st.args.items()
            }
            try:
                results = step.run(**args)
            except (TypeError, ValueError) as exc:
                raise InterpreterError(f"MIL line {st.line}: {st.op}: {exc}") from None
            if len(results) != len(st.outputs):
                raise InterpreterError(
                    f"MIL line {st.line}: {st.op} gives {len(results)} outputs, "
                    f"{len(st.outputs)} declared"
                )
            for (mil_type, name), result in zip(st.outputs, results, strict=True):
                with np.errstate(over="ignore"):  # an overflow is reported by _check
                    value = result.astype(_FLOATS.get(mil_type.dtype, result.dtype), copy=False)
                self._check(mil_type, name, value, st.line)
                env[name] = value
        return {name: np.asarray(env[name]) for name in self.function.outputs}


def _describe(value: Value) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array of shape {list(value.shape)}"
    return type(value).__name__
