"""Request and response bodies, as msgspec Structs.

Shapes follow the upstream APIs exactly: OpenAI's embeddings and models,
text-embeddings-inference's ``/embed``, ``/rerank``, ``/tokenize`` and
``/info``, the Cohere/Jina ``/v1/rerank`` that LangChain and LlamaIndex
send, and Cohere's ``/v2/rerank``. The OpenAPI document is generated from
these same Structs (:mod:`synapse_http.openapi`): a docstring here is a
description there. Optional response fields are omitted, never sent as ``null``
(``omit_defaults``): clients such as LiteLLM tell the two apart. Unknown
request fields are ignored, as upstream does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

#: any integer decodes: the host refuses one outside the model's vocabulary
#: (``invalid-token``, with the input's index and the id's position)
TokenId = Annotated[int, msgspec.Meta(description="a token id")]
#: one input: a text, or token ids (whose tokenizer depends on the route)
Input = str | list[TokenId]
#: ``input``/``inputs``: one input or a list; a flat list of ints is one input
Inputs = str | list[str | TokenId | list[TokenId]]
Direction = Literal["Left", "Right", "left", "right"]
Positive = Annotated[int, msgspec.Meta(ge=1)]


UNSET = msgspec.UNSET


class Body(msgspec.Struct, kw_only=True):
    """Base of every body."""


# -- OpenAI -------------------------------------------------------------------------


class EmbeddingsRequest(Body):
    input: Inputs
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Positive | None = None
    user: str | None = None
    #: Synapse's extension (send it with the OpenAI client's ``extra_body``)
    truncate: bool = False


class Embedding(Body):
    index: int
    embedding: list[float] | str
    object: str = "embedding"


class Usage(Body):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(Body):
    data: list[Embedding]
    model: str
    usage: Usage
    object: str = "list"
    #: indexes cut to the ceiling; present only when truncation was asked for
    truncated: list[int] | msgspec.UnsetType = UNSET


class ModelCard(Body):
    id: str
    created: int = 0
    owned_by: str = "synapse"
    object: str = "model"


class ModelList(Body):
    data: list[ModelCard]
    object: str = "list"


# -- text-embeddings-inference --------------------------------------------------------


class EmbedRequest(Body):
    inputs: Inputs
    normalize: bool = True
    truncate: bool | None = False
    truncation_direction: Direction = "Right"
    prompt_name: str | None = None
    dimensions: Positive | None = None


class RerankRequest(Body):
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool | None = False
    truncation_direction: Direction = "Right"


class Rank(Body):
    index: int
    score: float
    text: str | msgspec.UnsetType = UNSET


class TokenizeRequest(Body):
    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: str | None = None


class Token(Body):
    id: int
    text: str
    special: bool
    start: int | None = None
    stop: int | None = None


class Info(Body):
    model_id: str
    #: the name clients send as ``model`` (TEI's ``--served-model-name``)
    served_model_name: str
    model_dtype: str
    model_type: dict[str, dict[str, Any]]
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    model_sha: str | None = None
    sha: str | None = None
    docker_label: str | None = None
    max_batch_requests: int | None = None
    #: Synapse's own: the lossy conversion the model is served through (e.g.
    #: ``"int8"``, whose vectors are close to float32's, not equal), ``None``
    #: for none; and the worst and mean cosine of its vectors to float32's on
    #: the transport's fixed text set, ``None`` until measured
    quantize: str | None = None
    min_cosine_to_float32: float | None = None
    mean_cosine_to_float32: float | None = None


# -- Cohere / Jina rerank ---------------------------------------------------------------


class Document(Body):
    text: str


class CohereRerankRequest(Body):
    query: str
    documents: list[str | Document]
    model: str | None = None
    top_n: Positive | None = None
    return_documents: bool = False
    max_chunks_per_doc: int | None = None
    #: Synapse's extension: cut over-long documents instead of refusing them
    truncate: bool = False


class RerankResult(Body):
    index: int
    relevance_score: float
    document: Document | msgspec.UnsetType = UNSET


class ApiVersion(Body):
    version: str = "1"


class BilledUnits(Body):
    search_units: int = 1


class Meta(Body):
    api_version: ApiVersion = msgspec.field(default_factory=ApiVersion)
    billed_units: BilledUnits = msgspec.field(default_factory=BilledUnits)


class RerankUsage(Body):
    total_tokens: int


class CohereRerankResponse(Body):
    id: str
    results: list[RerankResult]
    model: str
    usage: RerankUsage
    meta: Meta = msgspec.field(default_factory=Meta)
    truncated: list[int] | msgspec.UnsetType = UNSET


# -- Cohere v2 rerank ---------------------------------------------------------------------


class CohereV2RerankRequest(Body):
    query: str
    documents: list[str]
    model: str | None = None
    top_n: Positive | None = None
    #: Cohere cuts longer documents to this many tokens; Synapse cuts them to
    #: the smaller of it and what fits the model's ceiling with the query
    max_tokens_per_doc: Positive | None = None


class V2RerankResult(Body):
    index: int
    relevance_score: float


class V2ApiVersion(Body):
    version: str = "2"


class V2Meta(Body):
    api_version: V2ApiVersion = msgspec.field(default_factory=V2ApiVersion)
    billed_units: BilledUnits = msgspec.field(default_factory=BilledUnits)


class CohereV2RerankResponse(Body):
    id: str
    results: list[V2RerankResult]
    meta: V2Meta = msgspec.field(default_factory=V2Meta)


# -- errors ------------------------------------------------------------------------------


class ErrorBody(Body):
    """Every error: TEI's ``error`` and ``error_type``, plus what Synapse knows."""

    error: str
    error_type: str
    #: the input at fault, when one is
    index: int | msgspec.UnsetType = UNSET
    #: the body field at fault (``$.input[2]``), for a malformed body
    field: str | msgspec.UnsetType = UNSET
    #: 503 only: whether the request may have run on a worker (never replayed)
    may_have_run: bool | msgspec.UnsetType = UNSET
    #: 500 only: the id under which the server logged the error
    error_id: str | msgspec.UnsetType = UNSET


class OpenAIError(Body):
    """An error on OpenAI's routes: OpenAI's fields, then :class:`ErrorBody`'s."""

    message: str
    type: str
    param: str | None
    code: str
    error_type: str
    index: int | msgspec.UnsetType = UNSET
    field: str | msgspec.UnsetType = UNSET
    may_have_run: bool | msgspec.UnsetType = UNSET
    error_id: str | msgspec.UnsetType = UNSET


class OpenAIErrorBody(Body):
    """OpenAI's error envelope, which the ``openai`` client reads."""

    error: OpenAIError
