"""``POST /v1/rerank`` in the shape Cohere and Jina clients send (LangChain,
LlamaIndex, LiteLLM): ``results[{index, relevance_score, document?}]``, best
first. ``document`` is omitted, never ``null``, unless asked for."""

from __future__ import annotations

import uuid

from starlette.responses import Response

from .inputs import sigmoid
from .pipeline import Incoming as Incoming  # the handler's request
from .pipeline import check_count, deadline_of, json_response, model_of, post, truncated_header
from .schemas import (
    UNSET,
    CohereRerankRequest,
    CohereRerankResponse,
    Document,
    RerankResult,
    RerankUsage,
)
from .service import Service


@post(CohereRerankRequest)
async def rerank(request: Incoming, service: Service, body: CohereRerankRequest) -> Response:
    """``relevance_score`` is the model's raw score (a cross-encoder's logit)
    through a sigmoid, as TEI's ``/rerank`` gives it by default: in [0, 1],
    in the model's order."""
    texts = [d if isinstance(d, str) else d.text for d in body.documents]
    check_count(len(texts), service.settings.max_inputs, "documents")
    model = model_of(request, body.model, service, "rerank")
    result = await service.host.rerank(
        model, body.query, texts, deadline=deadline_of(request, service), truncate=body.truncate
    )
    ranked = sorted(enumerate(result.raw_scores), key=lambda pair: -pair[1])[: body.top_n]
    answer = CohereRerankResponse(
        id=uuid.uuid4().hex,
        results=[
            RerankResult(
                index=i,
                relevance_score=sigmoid(score),
                document=Document(text=texts[i]) if body.return_documents else UNSET,
            )
            for i, score in ranked
        ],
        model=model,
        usage=RerankUsage(total_tokens=result.tokens),
        truncated=list(result.truncated) if body.truncate else UNSET,
    )
    return json_response(answer, headers=truncated_header(result.truncated))
