"""OpenAI's ``POST /v1/embeddings`` (also at ``/embeddings``, as TEI serves
it) and ``GET /v1/models``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .inputs import as_base64, embedded, inputs_of
from .openapi import Answer, answers
from .pipeline import (
    Incoming,
    check_count,
    deadline_of,
    json_response,
    model_of,
    post,
    service_of,
    truncated_header,
)
from .routes_tei import prompted_inputs
from .schemas import (
    UNSET,
    Embedding,
    EmbeddingsRequest,
    EmbeddingsResponse,
    ModelCard,
    ModelList,
    Usage,
)
from .service import Service, unavailable
from .tiktoken_ids import decoded


@post(EmbeddingsRequest, EmbeddingsResponse)
async def embeddings(request: Incoming, service: Service, body: EmbeddingsRequest) -> Response:
    """Token arrays in ``input`` are tiktoken ids (of the model's
    ``tiktoken_encoding``), as OpenAI reads them: decoded, their text is
    embedded, so they give the text's own vector. ``prompt_name`` (Synapse's
    extension) puts that prompt of the model in front of each text, decoded
    ones included; named none, the model's default prompt, as on ``/embed``."""
    inputs = inputs_of(body.input, "$.input")
    check_count(len(inputs), service.settings.max_inputs, "input")
    host = service.host
    model = model_of(request, body.model, service, "embed")
    if not all(isinstance(given, str) for given in inputs):
        encoding = host.catalog.entry(model, "embed").spec.tiktoken_encoding
        flat = len(inputs) == 1 and inputs[0] is body.input
        inputs = await decoded(inputs, encoding, "$.input", flat)
    inputs = prompted_inputs(service, model, body.prompt_name, inputs)
    result = await embedded(
        host,
        model,
        inputs,
        (body.dimensions, "$.dimensions"),
        deadline=deadline_of(request, service),
        truncate=body.truncate,
    )
    encode = as_base64 if body.encoding_format == "base64" else list
    data = [Embedding(index=i, embedding=encode(v)) for i, v in enumerate(result.vectors)]
    answer = EmbeddingsResponse(
        data=data,
        model=model,
        usage=Usage(prompt_tokens=result.tokens, total_tokens=result.tokens),
        truncated=list(result.truncated) if body.truncate else UNSET,
    )
    return json_response(answer, headers=truncated_header(result.truncated))


@answers(Answer(body=ModelList, summary="Every catalog model that can run here."))
async def models(request: Request) -> Response:
    """Every catalog model that can run here."""
    host = service_of(request).host
    down = unavailable(host)
    cards = [
        ModelCard(id=name, available=False, reason=down[name])
        if name in down
        else ModelCard(id=name)
        for name, entry in host.catalog.entries.items()
        if entry.available
    ]
    return json_response(ModelList(data=cards))
