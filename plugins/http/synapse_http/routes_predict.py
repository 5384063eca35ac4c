"""TEI's ``POST /predict``: a classifier's labels of a text, a pair of texts
(an NLI model's premise and hypothesis), or a list of them.

As TEI reads ``inputs``: a text or a list of two texts is one input, and
the answer is its labels, best first (``[{"score", "label"}]``); any other
list is a batch, and the answer one such list per input. Scores are the
softmax of the logits (each label's sigmoid for a multi-label model), or
the logits with ``raw_scores``. Calls the host's classify.
"""

from __future__ import annotations

from starlette.responses import Response

from synapse_core import ClassifyResult

from .inputs import truncation
from .pipeline import Incoming as Incoming  # the handler's request
from .pipeline import check_count, deadline_of, json_response, model_of, post, truncated_header
from .schemas import Prediction, PredictRequest
from .service import Service

Predictions = list[Prediction]


def _one(inputs: str | list[str | list[str]]) -> bool:
    """Whether ``inputs`` is one input: a text, or a pair (two texts)."""
    return isinstance(inputs, str) or (
        len(inputs) == 2 and all(isinstance(item, str) for item in inputs)
    )


@post(PredictRequest, (Predictions, list[Predictions]))
async def predict(request: Incoming, service: Service, body: PredictRequest) -> Response:
    one = _one(body.inputs)
    inputs = [body.inputs] if one else list(body.inputs)
    check_count(len(inputs), service.settings.max_inputs, "inputs")
    model = model_of(request, None, service, "classify")
    result = await service.host.classify(
        model,
        inputs,  # type: ignore[arg-type]
        raw_scores=body.raw_scores,
        deadline=deadline_of(request, service),
        truncate=truncation(body.truncate, body.truncation_direction),
    )
    answer = _answer(result)
    return json_response(answer[0] if one else answer, headers=truncated_header(result.truncated))


def _answer(result: ClassifyResult) -> list[Predictions]:
    return [
        [Prediction(score=p.score, label=p.label) for p in predictions]
        for predictions in result.predictions
    ]
