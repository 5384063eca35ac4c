"""text-embeddings-inference's routes: ``/embed``, ``/embed_sparse``,
``/embed_all``, ``/rerank``, ``/tokenize``, ``/info``, ``/health``, and ``/``,
the served model's task.

TEI serves one model; Synapse serves the catalog's default embed (or rerank)
model, or the one named by ``?model=`` or the ``X-Synapse-Model`` header.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from synapse_core import Entry, Kind, OutputsResult, Refused, TokenPiece
from synapse_core.frontend import matryoshka_sizes, shown

from .errors import invalid
from .inputs import embedded, inputs_of, normalized, sigmoid, truncation
from .openapi import Answer, answers
from .pipeline import (
    HEADER_MODEL,
    JSON,
    Incoming,
    PostRoute,
    check_count,
    deadline_of,
    json_response,
    model_of,
    post,
    service_of,
    truncated_header,
)
from .routes_predict import predict
from .schemas import (
    UNSET,
    EmbedAllRequest,
    EmbedRequest,
    EmbedSparseRequest,
    ErrorBody,
    Info,
    Rank,
    RerankRequest,
    SparseValue,
    Token,
    TokenizeRequest,
)
from .service import Service, unavailable
from .settings import VERSION

#: an input as a route holds it: a text, or token ids where the route takes them
Given = TypeVar("Given", bound=str | list[int])


@post(EmbedRequest, list[list[float]])
async def embed(request: Incoming, service: Service, body: EmbedRequest) -> Response:
    inputs = inputs_of(body.inputs, "$.inputs")
    check_count(len(inputs), service.settings.max_inputs, "inputs")
    host = service.host
    model = model_of(request, None, service, "embed")
    flat = len(inputs) == 1 and inputs[0] is body.inputs  # one input given as bare ids
    inputs = prompted_inputs(service, model, body.prompt_name, inputs, flat)
    inputs = _unframed(service, model, inputs)
    result = await embedded(
        host,
        model,
        inputs,
        (body.dimensions, "$.dimensions"),
        deadline=deadline_of(request, service),
        truncate=truncation(body.truncate, body.truncation_direction),
    )
    vectors = normalized(result.vectors) if body.normalize else result.vectors
    return json_response(vectors, headers=truncated_header(result.truncated))


async def outputs_of(
    request: Incoming,
    service: Service,
    given: Any,
    kinds: tuple[Kind, ...],
    prompt_name: str | None,
    truncate: bool | None,
    direction: str,
) -> OutputsResult:
    """The ``kinds`` of each input of ``given`` (a body's ``inputs``), from
    one forward pass; a model without one of them is refused
    (``unsupported-output``, naming what it computes)."""
    inputs = inputs_of(given, "$.inputs")
    check_count(len(inputs), service.settings.max_inputs, "inputs")
    model = model_of(request, None, service, "embed")
    flat = len(inputs) == 1 and inputs[0] is given
    inputs = prompted_inputs(service, model, prompt_name, inputs, flat)
    inputs = _unframed(service, model, inputs)
    return await service.host.embed_outputs(
        model,
        inputs,
        kinds,
        deadline=deadline_of(request, service),
        truncate=truncation(truncate, direction),
    )


@post(EmbedSparseRequest, list[list[SparseValue]])
async def embed_sparse(request: Incoming, service: Service, body: EmbedSparseRequest) -> Response:
    """TEI's sparse vectors: per input, its nonzero weights as ``{index,
    value}`` in index order (a SPLADE folder's, or bge-m3's sparse head's)."""
    result = await outputs_of(
        request, service, body.inputs, (Kind.SPARSE,), body.prompt_name,
        body.truncate, body.truncation_direction,
    )  # fmt: skip
    assert result.sparse is not None
    answer = [
        [SparseValue(index=i, value=v) for i, v in zip(row.indices, row.values, strict=True)]
        for row in result.sparse
    ]
    return json_response(answer, headers=truncated_header(result.truncated))


@post(EmbedAllRequest, list[list[list[float]]])
async def embed_all(request: Incoming, service: Service, body: EmbedAllRequest) -> Response:
    """TEI's token vectors: per input, one vector per token: a ColBERT
    head's (every token's but the first, normalised) for a folder with one,
    else the last hidden state of every token, special tokens included."""
    result = await outputs_of(
        request, service, body.inputs, (Kind.MULTI,), body.prompt_name,
        body.truncate, body.truncation_direction,
    )  # fmt: skip
    return json_response(result.multi, headers=truncated_header(result.truncated))


@post(RerankRequest, list[Rank])
async def rerank(request: Incoming, service: Service, body: RerankRequest) -> Response:
    """Ranks best first, each with its input ``index``; the model's raw scores
    (a cross-encoder's logits) pass through a sigmoid unless ``raw_scores``,
    as TEI does for a classifier's logit."""
    check_count(len(body.texts), service.settings.max_inputs, "texts")
    model = model_of(request, None, service, "rerank")
    result = await service.host.rerank(
        model,
        body.query,
        body.texts,
        deadline=deadline_of(request, service),
        truncate=truncation(body.truncate, body.truncation_direction),
    )
    ranks = [
        Rank(
            index=i,
            score=score if body.raw_scores else sigmoid(score),
            text=body.texts[i] if body.return_text else UNSET,
        )
        for i, score in enumerate(result.raw_scores)
    ]
    ranks.sort(key=lambda r: -r.score)
    return json_response(ranks, headers=truncated_header(result.truncated))


@post(TokenizeRequest, list[list[Token]])
async def tokenize(request: Incoming, service: Service, body: TokenizeRequest) -> Response:
    """Token ids as the model's tokenizer gives them; the text of each token
    and its span in the text's UTF-8 bytes (as TEI's) where the tokenizer
    can tell them."""
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    check_count(len(texts), service.settings.max_inputs, "inputs")
    model = model_of(request, None, service, "embed")
    entry = _entry(service, model)
    texts = prompted_inputs(service, model, body.prompt_name, texts)
    special = body.add_special_tokens
    tokenizer = entry.tokenizer

    def positions(tokens: list[Token | TokenRow]) -> int:
        return tokenizer.sequence_length([t.id for t in tokens if not t.special])

    answer = await service.tokenizing.answer(
        entry, texts, lambda text: _tokens(entry, text, special), positions
    )
    return Response(answer, media_type=JSON)


class ServedTask:
    """TEI's ``POST /``: the route of the served model's task, ``/embed`` for
    an embedding model and ``/rerank`` for a reranker. The served model is
    the one ``?model=`` or ``X-Synapse-Model`` names, else the catalog's first
    that can run here."""

    def __init__(self, routes: dict[str, PostRoute[Any]]) -> None:
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.serve(scope["app"].state.synapse, scope, receive, send)

    async def serve(self, service: Service, scope: Scope, receive: Receive, send: Send) -> int:
        route = self.routes.get(self.task(Incoming(scope), service), self.routes["embed"])
        return await route.serve(service, scope, receive, send)

    @staticmethod
    def task(request: Incoming, service: Service) -> str:
        """The served model's task; ``embed`` when there is no such model (the
        route then refuses the request, saying why)."""
        host = service.open
        if host is None:
            return "embed"
        named = request.query("model") or request.header(HEADER_MODEL)
        entries = host.catalog.entries
        entry = (
            entries.get(named)
            if named
            else next((e for e in entries.values() if e.available), None)
        )
        return entry.spec.task if entry is not None else "embed"


class TokenRow(msgspec.Struct):
    """:class:`~.schemas.Token`'s fields, positional, and encoded as it is: a
    long answer's rows are made by ``map`` from a tokenizer's columns, with no
    Python code run per token (the GIL stays free for the event loop)."""

    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


def _tokens(entry: Entry, text: str, special: bool) -> list[Token | TokenRow]:
    tokenizer = entry.tokenizer
    columns = getattr(tokenizer, "piece_columns", None)
    if columns is not None:  # the CPU lane's tokenizer: its pieces by column
        ids, texts, flags, starts, stops = columns(text, special)
        if not text.isascii():
            at = _byte_offsets(text)
            starts = [None if i is None else at(i) for i in starts]
            stops = [None if i is None else at(i) for i in stops]
        rows: list[Token | TokenRow] = list(map(TokenRow, ids, texts, flags, starts, stops))
        return rows
    describe = getattr(tokenizer, "pieces", None)
    # A tokenizer that cannot say what its tokens are gives their ids alone
    # (it adds its special tokens itself, so none are shown).
    pieces: list[TokenPiece] = (
        describe(text, special) if describe else [TokenPiece(i, "") for i in tokenizer.encode(text)]
    )
    at = _byte_offsets(text)
    return [
        Token(
            id=p.id,
            text=p.text,
            special=p.special,
            start=None if p.start is None else at(p.start),
            stop=None if p.stop is None else at(p.stop),
        )
        for p in pieces
    ]


def _byte_offsets(text: str) -> Callable[[int], int]:
    """Character index to UTF-8 byte offset in ``text``: TEI's spans count
    bytes (its tokenizer's offsets), where a piece's count characters."""
    if text.isascii():
        return lambda index: index
    before = [0, *itertools.accumulate(len(c.encode("utf-8", "surrogatepass")) for c in text)]
    return before.__getitem__


@answers(
    Answer(
        body=Info, errors=(401, 404, 500, 503), summary="TEI's model information.", names_model=True
    )
)
async def info(request: Request) -> Response:
    service = service_of(request)
    entry = _entry(service, model_of(Incoming(request.scope), None, service, "embed"))
    config = service.host.config
    spec = entry.spec
    traits = entry.traits
    labels = dict(enumerate(traits.labels))
    kind: dict[str, dict[str, object]] = (
        {"embedding": {"pooling": traits.pooling or "mean"}}
        if spec.task == "embed"
        else {
            "classifier": {
                "id2label": {str(i): label for i, label in labels.items()},
                "label2id": {label: i for i, label in labels.items()},
                "multi_label": traits.multi_label,  # Synapse's own: sigmoid, not softmax
            }
        }
        if spec.task == "classify"
        else {
            "reranker": {
                "id2label": {"0": "LABEL_0"},
                "label2id": {"LABEL_0": 0},
                # Synapse's own: whether query and document meet in the model
                "scorer": traits.scorer or "unknown",
                # an LLM reranker's: the instruction its prompt holds
                **({"instruction": traits.instruction} if traits.instruction else {}),
            }
        }
    )
    settings = service.settings
    # the transport may read a file for it: off the event loop
    conversion = await anyio.to_thread.run_sync(entry.conversion)
    reason = unavailable(service.host).get(spec.name)
    answer = Info(
        model_id=spec.name,
        served_model_name=spec.name,
        model_sha=None,
        model_dtype="float32",
        model_type=kind,
        max_concurrent_requests=config.max_concurrent,
        max_input_length=spec.ceiling,
        max_batch_tokens=spec.ceiling * settings.max_inputs,
        max_client_batch_size=settings.max_inputs,
        auto_truncate=False,
        tokenization_workers=1,
        version=VERSION,
        quantize=conversion.name if conversion else None,
        min_cosine_to_float32=conversion.min_cosine if conversion else None,
        mean_cosine_to_float32=conversion.mean_cosine if conversion else None,
        max_score_delta_to_float32=conversion.max_score_delta if conversion else None,
        worker_memory_mib=traits.worker_mib,
        matryoshka_dims=list(sizes) if (sizes := matryoshka_sizes(entry)) else UNSET,
        resident=service.host.resident(spec.name),
        available=reason is None,
        reason=UNSET if reason is None else reason,
    )
    return json_response(answer)


@answers(Answer(errors=(503,), summary="200 while serving, 503 when not (no key needed)."))
async def health(request: Request) -> Response:
    """200 while serving; 503 only when the server is not (starting, or
    stopping). It reflects the server, not each model: a model whose worker
    failed is shown unavailable, with its reason, on ``/v1/models`` and
    ``/info`` (behind the key), and the others keep serving. It names no
    model and no file: it answers without a key."""
    service = service_of(request)
    if service.stopping or service.open is None:
        return json_response(
            ErrorBody(
                error="the server is not serving (starting or stopping)", error_type="unhealthy"
            ),
            503,
        )
    return Response(status_code=200)


def _unframed(service: Service, model: str, inputs: list[str | list[int]]) -> list[str | list[int]]:
    """``inputs`` with the special tokens taken off each list of ids that
    begins and ends with the model's (``[CLS] ... [SEP]``), as ``/tokenize``
    gives them by default: the host frames every sequence itself, so ids sent
    framed would be framed twice. Ids sent without them are left as they are."""
    if all(isinstance(given, str) for given in inputs):
        return inputs
    framing = service.framing(model)
    if framing is None:
        return inputs
    head, tail = framing
    out: list[str | list[int]] = []
    for given in inputs:
        if (
            not isinstance(given, str)
            and len(given) >= len(head) + len(tail)
            and tuple(given[: len(head)]) == head
            and tuple(given[len(given) - len(tail) :]) == tail
        ):
            given = given[len(head) : len(given) - len(tail)]
        out.append(given)
    return out


def _entry(service: Service, model: str) -> Entry:
    entry = service.host.catalog.entries.get(model)
    if entry is None:
        raise Refused(
            "unknown-model",
            f"model {shown(model)} is not in the catalog; GET /v1/models lists the models",
            model=model,
        )
    return entry


def prompted_inputs(
    service: Service, model: str, name: str | None, inputs: list[Given], flat: bool = False
) -> list[Given]:
    """``inputs`` with the model's prompt ``name`` (or, named none, its
    default prompt, if its files give one) in front of each text, as
    sentence-transformers applies its prompts. A text without tokens gets
    none, so it is still refused as empty; token ids cannot take a named
    prompt's text (``flat``: the ids were the whole of ``$.inputs``) and are
    left as they are by the default one."""
    known_entry = service.host.catalog.entries.get(model)
    default = name is None
    if name is None:
        name = known_entry.traits.default_prompt if known_entry is not None else None
        if name is None:
            return inputs
    entry = _entry(service, model)
    prompt = entry.spec.prompts.get(name)
    if prompt is None:
        known = ", ".join(map(repr, sorted(entry.spec.prompts))) or "none in the catalog"
        raise invalid(
            f"$.prompt_name: model {model!r} has no prompt {shown(name)}; its prompts: {known}",
            "$.prompt_name",
            "unknown-prompt",
        )
    tokenizer = entry.tokenizer
    count = getattr(tokenizer, "count", None) or (lambda text: len(tokenizer.encode(text)))
    out: list[Given] = []
    for index, given in enumerate(inputs):
        if not isinstance(given, str):
            if default:
                out.append(given)
                continue
            field = "$.inputs" if flat else f"$.inputs[{index}]"
            raise invalid(
                f"{field} is token ids, which a prompt's text cannot be put in front of; "
                "give the text, or the prompt's ids with the input's and no prompt_name",
                field,
            )
        out.append(cast(Given, prompt + given) if count(given) else given)
    return out


#: ``POST /``
served = ServedTask({"embed": embed, "rerank": rerank, "classify": predict})
