"""The ONNX graph builder a family writes its body with.

No torch and no download: a graph is written node by node with the ``onnx``
package (imported when a :class:`Graph` is made). The whole model's graph,
the body and what follows it, is put together and cached by
:mod:`synapse_models.onnx_file`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


class Graph:
    """The nodes and initializers of a graph being written.

    Every method returns the name of the tensor it made; ``x`` arguments are
    such names. Inputs are ``input_ids``, ``token_type_ids`` and
    ``attention_mask``."""

    def __init__(self) -> None:
        from onnx import helper

        self.helper = helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._counter = iter(range(1 << 30))

    def name(self) -> str:
        return f"t{next(self._counter)}"

    def const(self, value: Array) -> str:
        from onnx import numpy_helper

        name = f"c{next(self._counter)}"
        # (np.ascontiguousarray would make a scalar one-dimensional)
        self.inits.append(numpy_helper.from_array(np.require(value, requirements="C"), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        out = self.name()
        self.nodes.append(self.helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def ops(self, kind: str, inputs: list[str], outputs: int, **attrs: Any) -> list[str]:
        """A node with several outputs (``Split``)."""
        names = [self.name() for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(kind, inputs, names, **attrs))
        return names

    def i64(self, *values: int) -> str:
        return self.const(np.array(values, dtype=np.int64))

    def f32(self, value: float) -> str:
        return self.const(np.array(value, dtype=np.float32))

    def layer_norm(self, x: str, g: Array, b: Array | None, eps: float) -> str:
        bias = b if b is not None else np.zeros_like(g)
        return self.op(
            "LayerNormalization", x, self.const(g), self.const(bias), axis=-1, epsilon=eps
        )

    def matmul(self, x: str, w: Array) -> str:
        return self.op("MatMul", x, self.const(w))

    def linear(self, x: str, w: Array, b: Array | None) -> str:
        product = self.matmul(x, w)
        return product if b is None else self.op("Add", product, self.const(b))

    def width(self) -> str:
        """(1,) int64: the batch's padded width."""
        return self.op("Gather", self.op("Shape", "input_ids"), self.i64(1), axis=0)

    def key_bias(self) -> str:
        """(rows, 1, 1, width): padding keys get the float32 minimum added to their scores."""
        bias = self.op(
            "Mul",
            self.op("Sub", self.f32(1.0), "attention_mask"),
            self.f32(float(np.finfo(np.float32).min)),
        )
        return self.op("Unsqueeze", bias, self.i64(1, 2))

    def gelu(self, x: str) -> str:
        """The exact (erf) GELU."""
        half_x = self.op("Mul", x, self.f32(float(np.sqrt(0.5))))
        cdf = self.op("Mul", self.op("Add", self.op("Erf", half_x), self.f32(1.0)), self.f32(0.5))
        return self.op("Mul", x, cdf)

    def gelu_tanh(self, x: str) -> str:
        """The tanh approximation of GELU: ``x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x³)))``."""
        cubic = self.op("Mul", self.op("Mul", self.op("Mul", x, x), x), self.f32(0.044715))
        inner = self.op("Mul", self.op("Add", x, cubic), self.f32(float(np.sqrt(2.0 / np.pi))))
        cdf = self.op("Mul", self.op("Add", self.op("Tanh", inner), self.f32(1.0)), self.f32(0.5))
        return self.op("Mul", x, cdf)

    def rms_norm(self, x: str, g: Array, eps: float) -> str:
        """RMSNorm over the last axis: ``x / sqrt(mean(x²) + eps) * g``."""
        mean_square = self.op("ReduceMean", self.op("Mul", x, x), axes=[-1], keepdims=1)
        root = self.op("Sqrt", self.op("Add", mean_square, self.f32(eps)))
        return self.op("Mul", self.op("Div", x, root), self.const(g))

    def rotate(self, x: str, cos: str, sin: str, dims: int) -> str:
        """``x`` (..., width, dims) turned by its position's angles (rotate-half),
        ``cos`` and ``sin`` (width, dims)."""
        first, second = self.ops("Split", [x, self.i64(dims // 2, dims // 2)], 2, axis=-1)
        turned = self.op("Concat", self.op("Neg", second), first, axis=-1)
        return self.op("Add", self.op("Mul", x, cos), self.op("Mul", turned, sin))

    def activate(self, x: str, activation: str) -> str:
        if activation == "tanh":
            return self.op("Tanh", x)
        if activation == "gelu":
            return self.gelu(x)
        return x
