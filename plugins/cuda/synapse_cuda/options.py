"""The CUDA transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core.plugin import count, positive
from synapse_core.plugin import parse_options as parse_into
from synapse_models.options import FolderOptions


@attrs.frozen
class CudaOptions(FolderOptions):
    """Plus a model folder's options (:class:`~synapse_models.options.FolderOptions`)."""

    #: which GPU: N of lane ``cuda:N``, the N-th that ``CUDA_VISIBLE_DEVICES`` shows
    gpu: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    #: the graph's floats: float16 (default; see docs/cuda-lane.md for the
    #: operators kept in float32) or float32
    precision: Literal["fp16", "fp32"] = "fp16"
    #: sequences per request
    max_batch: int = attrs.field(default=64, validator=positive)
    #: positions (rows x padded length) per forward pass: bounds the activations
    batch_tokens: int = attrs.field(default=16_384, validator=positive)
    #: onnxruntime's CPU threads (the few operators the GPU leaves to the CPU)
    threads: int = attrs.field(default=1, validator=count)


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> CudaOptions:
    """Structure ``options``; errors name the path, e.g. ``options.precision``."""
    return parse_into(options, CudaOptions, source, root)
