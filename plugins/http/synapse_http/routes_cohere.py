"""Cohere's ``POST /v2/embed`` (its v2 client's ``embed``): vectors in the
forms ``embedding_types`` asks for, Cohere's ``input_type`` mapped to the
model's prompts, and ``truncate`` NONE / START / END.

The forms (Cohere's names; docs/http.md says the same):

- ``float``: the model's vectors as they are.
- ``binary`` / ``ubinary``: one bit per dimension, 1 where the value is
  positive, packed eight to a byte, first dimension in the high bit
  (as ``numpy.packbits``); ``ubinary`` is the byte (0..255), ``binary`` the byte
  minus 128 (-128..127). Both are a vector of ``ceil(dims / 8)`` numbers, as
  Cohere and sentence-transformers' ``quantize_embeddings`` make them.
- ``int8`` / ``uint8``: each vector scaled by its largest absolute value to
  127 and rounded (-127..127); ``uint8`` adds 128 (1..255). Scaling a vector
  keeps its cosines; Cohere publishes no formula for these two, so this one
  is Synapse's.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from starlette.responses import Response

from .inputs import Cut, embedded
from .pipeline import Incoming as Incoming  # the handler's request
from .pipeline import check_count, deadline_of, json_response, model_of, post, truncated_header
from .schemas import (
    UNSET,
    CohereV2EmbedRequest,
    CohereV2EmbedResponse,
    EmbedBilledUnits,
    EmbeddingsByType,
    EmbeddingType,
    EmbedMeta,
    InputType,
)
from .service import Service

#: the prompt names each input type is looked up under, in order (the names
#: sentence-transformers folders use)
PROMPTS: dict[InputType, tuple[str, ...]] = {
    "search_query": ("query", "search_query", "Retrieval-query"),
    "search_document": ("document", "passage", "search_document", "Retrieval-document"),
    "classification": ("classification", "Classification"),
    "clustering": ("clustering", "Clustering"),
}
_TRUNCATE: dict[str, Cut] = {"NONE": False, "START": "start", "END": "end"}


@post(CohereV2EmbedRequest, CohereV2EmbedResponse)
async def embed_v2(request: Incoming, service: Service, body: CohereV2EmbedRequest) -> Response:
    """``input_type`` puts the model's prompt of that purpose in front of each
    text (``query`` for ``search_query``, ``document`` or ``passage`` for
    ``search_document``, ...), and none where the model has no such prompt."""
    check_count(len(body.texts), service.settings.max_inputs, "texts")
    model = model_of(request, body.model, service, "embed")
    host = service.host
    prompt = None
    if body.input_type is not None:
        prompts = host.catalog.entry(model, "embed").spec.prompts
        prompt = next((p for p in PROMPTS[body.input_type] if p in prompts), None)
    result = await embedded(
        host,
        model,
        body.texts,
        (body.output_dimension, "$.output_dimension"),
        deadline=deadline_of(request, service),
        truncate=_TRUNCATE[body.truncate],
        prompt_name=prompt,
    )
    kinds = body.embedding_types or ["float"]
    # "float" is the Struct's float_ (the attribute named float would hide the type)
    forms = {kind.replace("float", "float_"): as_type(result.vectors, kind) for kind in kinds}
    answer = CohereV2EmbedResponse(
        id=uuid.uuid4().hex,
        embeddings=EmbeddingsByType(**forms),
        texts=list(body.texts),
        meta=EmbedMeta(billed_units=EmbedBilledUnits(input_tokens=result.tokens)),
    )
    return json_response(answer, headers=truncated_header(result.truncated))


def as_type(vectors: Sequence[Sequence[float]], kind: EmbeddingType) -> list[list[Any]]:
    """``vectors`` in the form ``kind`` (see the module's docstring)."""
    if kind == "float":
        return [list(v) for v in vectors]
    if kind in ("binary", "ubinary"):
        shift = 128 if kind == "binary" else 0
        return [[byte - shift for byte in _packed_bits(v)] for v in vectors]
    offset = 128 if kind == "uint8" else 0
    out = []
    for vector in vectors:
        scale = 127.0 / max(max(map(abs, vector), default=0.0), 1e-12)
        out.append([round(x * scale) + offset for x in vector])
    return out


def _packed_bits(vector: Sequence[float]) -> list[int]:
    """One bit per value (1 where positive), eight to a byte, high bit first;
    the last byte padded with zeros."""
    out = []
    for start in range(0, len(vector), 8):
        byte = 0
        for bit, x in enumerate(vector[start : start + 8]):
            byte |= (x > 0) << (7 - bit)
        out.append(byte)
    return out


__all__ = ["UNSET", "embed_v2"]
