"""The CPU transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core.plugin import FieldInvalid, count, positive
from synapse_core.plugin import parse_options as parse_into
from synapse_models.options import FolderOptions

#: MiniLM's buckets (its ceiling is 256), what a folder of ceiling 256 gets
DEFAULT_BUCKETS = (32, 64, 128, 256)


def _onnx_only(instance: CpuOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.runtime == "numpy":
        raise FieldInvalid(
            attribute.name, f'{value} needs runtime = "onnxruntime": numpy has no quantized graph'
        )


@attrs.frozen
class CpuOptions(FolderOptions):
    """Plus a model folder's options (:class:`~synapse_models.options.FolderOptions`)."""

    #: the forward pass: onnxruntime or numpy; default (``None``): onnxruntime,
    #: or numpy with a one-line notice where onnxruntime cannot be imported
    runtime: Literal["numpy", "onnxruntime"] | None = None
    #: ``"int8"``: serve a dynamically quantized graph (onnxruntime only; lossy)
    quantize: Literal["int8"] | None = attrs.field(default=None, validator=_onnx_only)
    #: sequences per request
    max_batch: int = attrs.field(default=32, validator=positive)
    #: positions (rows x padded length) per forward slice: bounds the activations
    batch_tokens: int = attrs.field(default=2048, validator=positive)
    #: BLAS / onnxruntime threads per worker; default (``None``): the cores this
    #: process may use, shared out among the lane's busy workers
    threads: int | None = attrs.field(default=None, validator=count)
    #: onnxruntime's idle pool threads spin-wait for the next operator (its
    #: default) or, ``false``, sleep: on a machine whose cores the host
    #: process and other work share, spinning takes their time (docs/cpu-lane.md)
    spin_wait: bool = True


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> CpuOptions:
    """Structure ``options``; errors name the path, e.g. ``options.runtime``."""
    return parse_into(options, CpuOptions, source, root)
