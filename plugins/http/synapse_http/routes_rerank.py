"""``POST /v1/rerank`` in the shape Cohere and Jina clients send (LangChain,
LlamaIndex, LiteLLM): ``results[{index, relevance_score, document?}]``, best
first. ``document`` is omitted, never ``null``, unless asked for. And Cohere's
``POST /v2/rerank`` (its v2 client, langchain-cohere, LlamaIndex and LiteLLM
``cohere/``): ``results[{index, relevance_score}]``, best first. All of them
call the host's rerank, as TEI's ``/rerank`` does."""

from __future__ import annotations

import uuid

from starlette.responses import Response

from synapse_core import Entry, TokenPiece

from .inputs import sigmoid
from .pipeline import Incoming as Incoming  # the handler's request
from .pipeline import check_count, deadline_of, json_response, model_of, post, truncated_header
from .schemas import (
    UNSET,
    CohereRerankRequest,
    CohereRerankResponse,
    CohereV2RerankRequest,
    CohereV2RerankResponse,
    Document,
    RerankResult,
    RerankUsage,
    V2RerankResult,
)
from .service import Service


@post(CohereRerankRequest, CohereRerankResponse)
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
    ranked = best_first(result.raw_scores, body.top_n)
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


@post(CohereV2RerankRequest, CohereV2RerankResponse)
async def rerank_v2(request: Incoming, service: Service, body: CohereV2RerankRequest) -> Response:
    """As Cohere does, documents too long for the model are cut to fit (and
    to ``max_tokens_per_doc`` tokens when given), never refused; the
    ``X-Synapse-Truncated`` header lists which were cut."""
    check_count(len(body.documents), service.settings.max_inputs, "documents")
    model = model_of(request, body.model, service, "rerank")
    documents = body.documents
    cut: list[int] = []
    if body.max_tokens_per_doc is not None:
        entry = service.host.catalog.entry(model, "rerank")
        documents, cut = cut_to(entry, body.documents, body.max_tokens_per_doc)
    result = await service.host.rerank(
        model, body.query, documents, deadline=deadline_of(request, service), truncate=True
    )
    answer = CohereV2RerankResponse(
        id=uuid.uuid4().hex,
        results=[
            # the raw scores (a cross-encoder's logits) through a sigmoid, as /v1/rerank's
            V2RerankResult(index=i, relevance_score=sigmoid(score))
            for i, score in best_first(result.raw_scores, body.top_n)
        ],
    )
    truncated = tuple(sorted({*cut, *result.truncated}))
    return json_response(answer, headers=truncated_header(truncated))


def best_first(scores: list[float], top_n: int | None) -> list[tuple[int, float]]:
    """``(index, score)`` pairs, best first, the first ``top_n`` of them."""
    return sorted(enumerate(scores), key=lambda pair: -pair[1])[:top_n]


def cut_to(entry: Entry, texts: list[str], limit: int) -> tuple[list[str], list[int]]:
    """``texts`` with each of more than ``limit`` tokens (of ``entry``'s
    tokenizer) cut after its
    ``limit``-th token, and the indexes cut. The cut is made in the text, where
    the tokenizer says a token ends (``DescribingTokenizer``), so the host is
    given text as ever; a tokenizer that cannot say leaves the texts whole
    (still cut to the ceiling)."""
    describe = getattr(entry.tokenizer, "pieces", None)
    if describe is None:
        return texts, []
    out: list[str] = []
    cut: list[int] = []
    for index, text in enumerate(texts):
        try:
            pieces: list[TokenPiece] = describe(text, False)
        except Exception:  # the host's own tokenizing reports it, naming the input
            pieces = []
        stop = pieces[limit - 1].stop if len(pieces) > limit else None
        if stop is None:
            out.append(text)
        else:
            out.append(text[:stop])
            cut.append(index)
    return out, cut
