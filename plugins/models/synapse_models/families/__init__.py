"""Model families: one module each, every one implementing :class:`Family`,
registered here by the ``model_type`` that ``config.json`` names.

A family knows everything about its architecture and nothing about a device:
how to read and check its ``config.json``, where its position table starts,
how to arrange its checkpoint's tensors (by the hub's own names), its body's
forward pass in numpy and as an ONNX graph, its classification head, and
which matrix products int8 keeps in float32. What follows the body (pooling,
Dense modules, Normalize) is shared (:mod:`synapse_models.heads`). Adding a
family is one module here and one line in :data:`FAMILIES`
(docs/models.md says how, and how to prove it against a reference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ModelFilesError
from .protocol import Family as Family
from .protocol import Sizes as Sizes


def _registry() -> dict[str, Family]:
    from . import deberta, encoder, gemma3, gte, modernbert, nomic, qwen3

    families: tuple[Family, ...] = (
        encoder.BERT,
        encoder.XLM_ROBERTA,
        encoder.MPNET,
        deberta.DEBERTA_V2,
        modernbert.MODERNBERT,
        nomic.NOMIC,
        gemma3.GEMMA3,
        qwen3.QWEN3,
        gte.GTE,
    )
    return {model_type: f for f in families for model_type in f.model_types}


#: every family, by the ``model_type`` its ``config.json`` names
FAMILIES: dict[str, Family] = _registry()


def family_for(config: Mapping[str, Any], source: str) -> Family:
    """The family of a ``config.json``, or :class:`ModelFilesError` listing the supported ones."""
    model_type = config.get("model_type")
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        names = ", ".join(FAMILIES)
        raise ModelFilesError(
            source,
            f"model_type {model_type!r} is not supported; supported: {names} "
            "(docs/models.md lists the hub models of each)",
        )
    return family


def strips_texts(family: Family) -> bool:
    """Whether texts lose their surrounding whitespace before they are encoded.

    A family may say ``strips_texts = False`` (an optional attribute, true
    where absent): the encoder family's references were computed on stripped
    texts (transformers rebuilds XLM-R's pipeline, which drops them), while
    sentence-transformers gives a tokenizer that keeps spaces as tokens
    (Gemma's) the text as written.
    """
    return bool(getattr(family, "strips_texts", True))


def cross_encoders() -> tuple[str, ...]:
    """Every architecture served as a cross-encoder, in registry order."""
    seen = dict.fromkeys(a for f in FAMILIES.values() for a in f.cross_encoders)
    return tuple(seen)
