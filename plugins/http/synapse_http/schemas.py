"""Request and response bodies, as msgspec Structs.

Shapes follow the upstream APIs exactly: OpenAI's embeddings and models,
text-embeddings-inference's ``/embed``, ``/rerank``, ``/tokenize`` and
``/info``, the Cohere/Jina ``/v1/rerank`` that LangChain and LlamaIndex
send, and Cohere's ``/v2/rerank`` and ``/v2/embed``. The OpenAPI document is generated from
these same Structs (:mod:`synapse_http.openapi`): a docstring here is a
description there. Optional response fields are omitted, never sent as ``null``
(``omit_defaults``): clients such as LiteLLM tell the two apart. Unknown
request fields are ignored, as upstream does.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

# What the schema says and the decoder does not check is checked by the host,
# with its own error codes (and the input's index): those constraints are
# published (``extra_json_schema``) but not decoded, so a client gets the same
# refusal whether or not it read the schema. The schema says all that can be
# said without knowing the model; docs/http.md lists what it cannot say.

#: any integer decodes: the host refuses one that is negative or past 32 bits,
#: or past the model's vocabulary, as ``invalid-token`` (with the input's
#: index and the id's position)
TokenId = Annotated[
    int,
    msgspec.Meta(
        description="a token id (of the model's tokenizer; tiktoken's on OpenAI's routes)",
        extra_json_schema={"minimum": 0, "maximum": 2**31 - 1},
    ),
]
#: a text the host can take: it refuses an empty one (``empty-sequence``)
Text = Annotated[str, msgspec.Meta(extra_json_schema={"minLength": 1})]
#: one input given as token ids; the host refuses an empty one (``empty-sequence``)
TokenArray = Annotated[list[TokenId], msgspec.Meta(extra_json_schema={"minItems": 1})]
#: where a list of inputs is counted against ``--max-inputs`` (413
#: ``too-many-inputs``): the document puts the server's limit here as ``maxItems``
MAX_INPUTS = "x-synapse-max-inputs"
#: a list of inputs: at least one (else ``empty-input``), at most ``--max-inputs``
COUNTED = {"minItems": 1, MAX_INPUTS: True}
#: a list of texts (or, for rerank, documents)
Texts = Annotated[list[Text], msgspec.Meta(extra_json_schema=COUNTED)]
#: ``input``/``inputs``: a text, one token array, or a list of texts and token
#: arrays (mixed as TEI takes them). msgspec decodes one array type per union,
#: so the array is decoded as a list of any of them, and
#: :func:`~synapse_http.inputs.inputs_of` refuses a bare id among texts or
#: arrays; the schema says the same with an ``anyOf`` on the array.
Inputs = (
    Text
    | Annotated[
        list[Text | TokenId | TokenArray],
        msgspec.Meta(
            extra_json_schema={
                "anyOf": [
                    msgspec.json.schema(TokenArray),
                    msgspec.json.schema(
                        Annotated[list[Text | TokenArray], msgspec.Meta(extra_json_schema=COUNTED)]
                    ),
                ]
            }
        ),
    ]
)
#: ``inputs`` when a ``prompt_name`` is given: texts only, since a prompt's
#: text cannot go in front of token ids (the document's ``if``/``then``)
PROMPTED_INPUTS = msgspec.json.schema(Text | Texts)
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
    #: Synapse's extensions (send them with the OpenAI client's ``extra_body``):
    #: cut over-long texts, and put the model's prompt of that name (``query``)
    #: in front of each text, as ``/embed``'s ``prompt_name`` does
    truncate: bool = False
    prompt_name: str | None = None


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
    #: Synapse's own: whether the model can serve now (false once its worker
    #: failed for good, or while its start backs off after a failure), and
    #: why not, with the server's paths shortened
    available: bool = True
    reason: str | msgspec.UnsetType = UNSET


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


class EmbedSparseRequest(Body):
    """TEI's ``/embed_sparse`` (and ``/embed_all``'s) request."""

    inputs: Inputs
    truncate: bool | None = False
    truncation_direction: Direction = "Right"
    prompt_name: str | None = None


class EmbedAllRequest(EmbedSparseRequest):
    """TEI's ``/embed_all`` request: ``/embed_sparse``'s fields."""


class SparseValue(Body):
    """One weight of a sparse vector (TEI's ``/embed_sparse``): its index, a
    token id of the model's vocabulary."""

    index: int
    value: float


#: an output ``/v1/encode`` computes
OutputKind = Literal["dense", "sparse", "multi"]


class EncodeRequest(Body):
    """Synapse's ``/v1/encode``: the ``outputs`` of each input, all from one
    forward pass of the model (TEI's ``/embed`` fields besides)."""

    inputs: Inputs
    outputs: Annotated[list[OutputKind], msgspec.Meta(min_length=1, max_length=3)]
    #: the dense vectors are L2-normalised (as ``/embed``'s ``normalize``)
    normalize: bool = True
    truncate: bool | None = False
    truncation_direction: Direction = "Right"
    prompt_name: str | None = None


class SparseVector(Body):
    """A sparse vector as vector databases take it (Qdrant's ``SparseVector``:
    ``indices`` increasing, ``values`` their weights)."""

    indices: list[int]
    values: list[float]


class EncodeResponse(Body):
    """The outputs asked for, each in input order; one not asked for is left out."""

    model: str
    #: the vector-space identity of the worker that computed them
    identity: str
    dense: list[list[float]] | msgspec.UnsetType = UNSET
    sparse: list[SparseVector] | msgspec.UnsetType = UNSET
    #: per input, one vector per token (a ColBERT head's, else the last hidden state)
    multi: list[list[list[float]]] | msgspec.UnsetType = UNSET
    #: indexes cut to the ceiling; present only when truncation was asked for
    truncated: list[int] | msgspec.UnsetType = UNSET


class RerankRequest(Body):
    query: Text
    texts: Texts
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool | None = False
    truncation_direction: Direction = "Right"


class Rank(Body):
    index: int
    score: float
    text: str | msgspec.UnsetType = UNSET


#: a pair of texts (an NLI model's premise and hypothesis)
Pair = Annotated[list[Text], msgspec.Meta(min_length=2, max_length=2)]
#: TEI's ``/predict`` inputs: a text, a pair, or a list of texts and pairs (a
#: list of two texts is one pair, as TEI reads it)
PredictInputs = Text | Annotated[list[Text | Pair], msgspec.Meta(extra_json_schema=COUNTED)]


class PredictRequest(Body):
    inputs: PredictInputs
    raw_scores: bool = False
    truncate: bool | None = False
    truncation_direction: Direction = "Right"


class Prediction(Body):
    score: float
    label: str


class TokenizeRequest(Body):
    inputs: str | Annotated[list[str], msgspec.Meta(extra_json_schema={MAX_INPUTS: True})]
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
    #: Synapse's own: the sizes an embedder's vectors may be cut to (``dimensions``)
    matryoshka_dims: list[int] | msgspec.UnsetType = UNSET
    min_cosine_to_float32: float | None = None
    mean_cosine_to_float32: float | None = None
    #: a cross-encoder's: the worst absolute difference of its scores (logits)
    #: to float32's on the same texts, ``None`` until measured
    max_score_delta_to_float32: float | None = None
    #: Synapse's own: the memory one worker of the model holds, in MiB, as
    #: its transport estimates it from the files (``None``: not said)
    worker_memory_mib: int | None = None
    #: Synapse's own, as on ``/v1/models``: whether the model can serve now,
    #: and why not
    available: bool = True
    reason: str | msgspec.UnsetType = UNSET
    #: Synapse's own: whether the model has a worker process now (false
    #: before its first call, and once let go when idle: ``idle_unload_s``)
    resident: bool = False


# -- Cohere / Jina rerank ---------------------------------------------------------------


class Document(Body):
    text: Text


class CohereRerankRequest(Body):
    query: Text
    documents: Annotated[list[Text | Document], msgspec.Meta(extra_json_schema=COUNTED)]
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
    query: Text
    documents: Texts
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


# -- Cohere v2 embed ----------------------------------------------------------------------

#: Cohere's kinds of input; each is the model's prompt of that purpose, if it has one
InputType = Literal["search_document", "search_query", "classification", "clustering"]
EmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary"]


class CohereV2EmbedRequest(Body):
    texts: Texts
    model: str | None = None
    input_type: InputType | None = None
    #: the forms of each vector to return (default: float)
    embedding_types: Annotated[list[EmbeddingType], msgspec.Meta(min_length=1)] | None = None
    #: NONE refuses a text over the model's ceiling (Synapse's rule); END and
    #: START cut it at that end (Cohere's default is END)
    truncate: Literal["NONE", "START", "END"] = "END"
    #: the vectors' size: the model's own, or one it may be cut to (Matryoshka)
    output_dimension: Positive | None = None


class EmbeddingsByType(Body):
    """Each asked-for form of the vectors, one row per text, in input order."""

    #: ``float`` on the wire (the attribute's name would hide the type)
    float_: list[list[float]] | msgspec.UnsetType = msgspec.field(default=UNSET, name="float")
    int8: list[list[int]] | msgspec.UnsetType = UNSET
    uint8: list[list[int]] | msgspec.UnsetType = UNSET
    binary: list[list[int]] | msgspec.UnsetType = UNSET
    ubinary: list[list[int]] | msgspec.UnsetType = UNSET


class EmbedBilledUnits(Body):
    input_tokens: int


class EmbedMeta(Body):
    api_version: V2ApiVersion = msgspec.field(default_factory=V2ApiVersion)
    billed_units: EmbedBilledUnits | msgspec.UnsetType = UNSET


class CohereV2EmbedResponse(Body):
    id: str
    embeddings: EmbeddingsByType
    texts: list[str]
    meta: EmbedMeta = msgspec.field(default_factory=EmbedMeta)
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


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
