"""Synapse's ``POST /v1/encode``: several outputs of a model at once (dense,
sparse and token vectors), all from one forward pass of the model, where
TEI's ``/embed``, ``/embed_sparse`` and ``/embed_all`` would run it once each.
"""

from __future__ import annotations

from starlette.responses import Response

from synapse_core import Kind

from .inputs import normalized
from .pipeline import Incoming, json_response, post, truncated_header
from .routes_tei import outputs_of
from .schemas import UNSET, EncodeRequest, EncodeResponse, SparseVector
from .service import Service


@post(EncodeRequest, EncodeResponse)
async def encode(request: Incoming, service: Service, body: EncodeRequest) -> Response:
    """The ``outputs`` asked for (``dense``, ``sparse``, ``multi``) of each
    input, from one forward pass; sparse vectors as ``{indices, values}``
    (Qdrant's ``SparseVector``)."""
    kinds = tuple(dict.fromkeys(Kind(kind) for kind in body.outputs))
    result = await outputs_of(
        request, service, body.inputs, kinds, body.prompt_name,
        body.truncate, body.truncation_direction,
    )  # fmt: skip
    dense = result.dense
    if dense is not None and body.normalize:
        dense = normalized(dense)
    answer = EncodeResponse(
        model=result.model,
        identity=result.identity,
        dense=UNSET if dense is None else dense,
        sparse=UNSET
        if result.sparse is None
        else [SparseVector(indices=v.indices, values=v.values) for v in result.sparse],
        multi=UNSET if result.multi is None else result.multi,
        truncated=list(result.truncated) if body.truncate else UNSET,
    )
    return json_response(answer, headers=truncated_header(result.truncated))
