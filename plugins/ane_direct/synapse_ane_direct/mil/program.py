"""A generated MIL program: its text, its I/O and the weights its text names."""

from __future__ import annotations

from typing import Literal

import attrs

DType = Literal["fp16", "fp32"]
DTYPES: tuple[DType, ...] = ("fp16", "fp32")
#: Where every ``BLOBFILE`` of a generated program points.
WEIGHTS_PATH = "@model_path/weights/weight.bin"


@attrs.frozen
class TensorSpec:
    name: str
    dtype: DType
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        count = 1
        for n in self.shape:
            count *= n
        return count * (2 if self.dtype == "fp16" else 4)


@attrs.frozen
class WeightRef:
    """One constant in the weight file.

    ``source`` names the safetensors tensor it comes from; ``transform`` says
    how (``""`` as is, ``"conv"`` a ``[out, in]`` matrix as ``[out, in, 1, 1]``,
    ``"positions"`` position + token-type-0 embeddings as ``[1, C, 1, S]``).
    """

    name: str
    source: str
    transform: str
    shape: tuple[int, ...]
    offset: int  # of the blob's metadata record, as the program's BLOBFILE says


@attrs.frozen
class Program:
    bucket: int
    dtype: DType
    text: str
    inputs: tuple[TensorSpec, ...]
    output: TensorSpec
    weights: tuple[WeightRef, ...]
