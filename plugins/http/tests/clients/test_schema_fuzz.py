"""schemathesis, from the server's own ``/openapi.json``: every operation,
positive cases, and negative ones for those that take a body; bounded (a
fixed seed, ``EXAMPLES`` cases per operation and mode), on the mock models
and MiniLM.

It fails on any 5xx, on any status, content type, header or body the
document does not declare, on negative data the server accepts, on positive
data it refuses (but for the refusals only the named model can explain:
:data:`MODEL_DEPENDENT`), and on a server that stops answering. Afterwards
the host, as ``/metrics`` shows it, holds no lease, call in flight or
waiting call, and no worker was restarted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, MutableMapping
from typing import Any

import msgspec
import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from synapse_http.schemas import EmbedRequest, PredictRequest, RerankRequest
from synapse_http.testing import AUTH, Server, metric

from .conftest import MODELS, serving

SEED = 22
EXAMPLES = 25
#: seconds one request may take before the server counts as not answering
REQUEST_S = 30.0
#: sent with every case: the key, and a deadline. A fuzzed deadline of a few
#: milliseconds would be answered 504 by design, which is not a finding.
HEADERS = {**AUTH, "X-Synapse-Timeout-Ms": str(int(REQUEST_S * 1000))}
MODEL = "X-Synapse-Model"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    positive_data_acceptance,
]


#: a negative case may be refused with 413 too: a list over ``maxItems``
#: (``--max-inputs``) is ``too-many-inputs``, as OpenAI answers it
CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "negative_data_rejection": {
                "expected-statuses": [
                    *("400", "401", "403", "404", "405", "406", "409", "413", "415"),
                    *("422", "428", "429", "5xx"),
                ]
            }
        }
    }
)
#: refusals the document cannot foresee, by status: each depends on the one
#: model a request names (its vocabulary, ceiling, tokenizer and vector size),
#: which the document cannot tie to the fields it constrains (the outputs it
#: computes: ``/embed_sparse`` of a dense model; the prompts it has: a
#: ``prompt_name`` the model lacks). A positive case may get
#: one of these, else only what positive_data_acceptance accepts.
MODEL_DEPENDENT = {
    422: frozenset(
        {
            "invalid-token",
            "over-ceiling",
            "empty-sequence",
            "unsupported-dimensions",
            "unsupported-output",
            "unknown-prompt",
        }
    ),
}
#: the served models by task: ``POST /`` serves the task of the model the
#: request names, which the document cannot tie to the body it takes
SERVED = {
    task: [entry["name"] for entry in MODELS if entry["task"] == task]
    for task in ("embed", "rerank", "classify")
}


def refusal(response: Any) -> str | None:
    """The code of a :data:`MODEL_DEPENDENT` refusal, else ``None``."""
    codes = MODEL_DEPENDENT.get(response.status_code, frozenset())
    if not codes:
        return None
    body = response.json()
    error = body["error"]
    # OpenAI's routes wrap the error: {"error": {"type": ...}}
    code = error["type"] if isinstance(error, dict) else body["error_type"]
    return code if code in codes else None


def name_models(case: Any, data: st.DataObject) -> None:
    """Where a positive case names a model in the query or a header, a served
    model of the route's task, four times in five (else the generated name,
    which only reaches ``unknown-model``). The document lists the names only
    for a body's ``model``: the body's name wins over these, so they are
    strings there."""
    if case.operation.path == "/":
        # The task is the named model's (else the catalog's first's): one of the body's.
        served = SERVED[body_task(case.body)]
        case.query = {**(case.query or {}), "model": data.draw(st.sampled_from(served))}
        return
    path = case.operation.path
    task = "rerank" if "rerank" in path else "classify" if path == "/predict" else "embed"
    served = SERVED[task]
    name = data.draw(st.sampled_from([None, *served, *served]))
    if name is not None:
        for part, key in ((case.query, "model"), (case.headers, MODEL)):
            if isinstance(part, MutableMapping) and key in part:
                part[key] = name


def body_task(body: object) -> str:
    """The task ``POST /``'s ``body`` is for: ``rerank`` if it is TEI's rerank
    body, ``classify`` if it is a predict body and no embed body (pairs),
    else ``embed``."""

    def fits(schema: type) -> bool:
        try:
            msgspec.convert(body, schema)
        except msgspec.ValidationError:
            return False
        return True

    if fits(RerankRequest):
        return "rerank"
    return "classify" if fits(PredictRequest) and not fits(EmbedRequest) else "embed"


def quiet(server: Server) -> dict[str, Any]:
    """What must be the same before and after: no work held, the same generations."""
    text = server.metrics()
    return {
        "leases": sum(metric(text, "synapse_worker_leases")),
        "inflight": sum(metric(text, "synapse_worker_inflight")),
        "waiting": sum(metric(text, "synapse_calls_waiting")),
        "generations": {
            entry["name"]: metric(text, "synapse_worker_generation", model=entry["name"])
            for entry in MODELS
        },
    }


Statuses = Counter[tuple[GenerationMode, int]]


def fuzz(
    operation: Any,
    mode: GenerationMode,
    url: str,
    counts: Counter[str],
    statuses: Statuses,
    refused: Counter[str],
) -> None:
    cases = operation.as_strategy(generation_mode=mode, headers=HEADERS)
    positive = mode is GenerationMode.POSITIVE

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(case=cases, data=st.data())
    def run(case: Any, data: st.DataObject) -> None:
        if positive:
            name_models(case, data)
        counts[f"{mode.value} {operation.label}"] += 1
        response = case.call(base_url=url, timeout=REQUEST_S)
        statuses[mode, response.status_code] += 1
        code = refusal(response) if positive else None
        if code is None:
            case.validate_response(response, checks=CHECKS)
        else:
            refused[code] += 1
            case.validate_response(
                response, checks=CHECKS, excluded_checks=[positive_data_acceptance]
            )

    run()


@pytest.fixture(params=["asyncio", "trio"])
def fuzzed(
    request: pytest.FixtureRequest, server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """The suite's server (asyncio), and one on trio for this test alone."""
    if request.param == "asyncio":
        yield server
        return
    with serving(tmp_path_factory.mktemp("fuzz-trio"), "trio") as running:
        yield running


def test_schemathesis_finds_nothing_and_the_host_is_left_quiet(fuzzed: Server) -> None:
    server = fuzzed
    before = quiet(server)
    assert all(before["generations"].values()), before  # every worker is up
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json", config=CONFIG)
    operations = [result.ok() for result in schema.get_all_operations()]
    counts: Counter[str] = Counter()
    statuses: Statuses = Counter()
    refused: Counter[str] = Counter()
    for operation in operations:
        fuzz(operation, GenerationMode.POSITIVE, server.url, counts, statuses, refused)
        if operation.method.upper() == "POST":  # a GET here takes nothing to get wrong
            fuzz(operation, GenerationMode.NEGATIVE, server.url, counts, statuses, refused)
    print(f"schemathesis: {len(operations)} operations, {sum(counts.values())} cases", counts)
    print("statuses:", sorted(statuses.items()))
    print("model-dependent refusals of positive cases:", dict(refused))
    # Most positive cases reach a model and are served, not refused.
    positive = sum(n for (mode, _), n in statuses.items() if mode is GenerationMode.POSITIVE)
    assert statuses[GenerationMode.POSITIVE, 200] > positive // 3, statuses
    assert {label.split(" ", 1)[1] for label in counts} == {op.label for op in operations}
    assert len(operations) >= 13  # what the document held when this was written
    with server.client() as client:
        assert client.get("/health").status_code == 200
    assert quiet(server) == {**before, "leases": 0, "inflight": 0, "waiting": 0}
    assert server.proc.poll() is None
