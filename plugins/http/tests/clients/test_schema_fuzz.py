"""schemathesis, from the server's own ``/openapi.json``: every operation,
positive cases, and negative ones for those that take a body; bounded (a
fixed seed, ``EXAMPLES`` cases per operation and mode), on the mock models
and MiniLM.

It fails on any 5xx, on any status, content type, header or body the
document does not declare, on negative data the server accepts, and on a
server that stops answering. Afterwards the host, as ``/metrics`` shows it,
holds no lease, call in flight or waiting call, and no worker was restarted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import MutableMapping
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from synapse_http.testing import AUTH, Server, metric

from .conftest import MODELS

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
]


def model_names(task: str) -> st.SearchStrategy[str | None]:
    """The model a case names (in its body, ``?model=`` or ``X-Synapse-Model``):
    a served model of the route's task four times in five, else the generated
    name (which only reaches ``unknown-model``)."""
    served = [entry["name"] for entry in MODELS if entry["task"] == task]
    return st.sampled_from([None, *served, *served])


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
    operation: Any, mode: GenerationMode, url: str, counts: Counter[str], statuses: Statuses
) -> None:
    task = "rerank" if "rerank" in operation.path else "embed"
    cases = operation.as_strategy(generation_mode=mode, headers=HEADERS)

    @seed(SEED)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(case=cases, name=model_names(task))
    def run(case: Any, name: str | None) -> None:
        # Wherever a positive case names a model (a negative case's name may be
        # what makes it negative: left as generated).
        if name is not None and mode is GenerationMode.POSITIVE:
            for part, key in ((case.body, "model"), (case.query, "model"), (case.headers, MODEL)):
                if isinstance(part, MutableMapping) and key in part:
                    part[key] = name
        counts[f"{mode.value} {operation.label}"] += 1
        response = case.call(base_url=url, timeout=REQUEST_S)
        statuses[mode, response.status_code] += 1
        case.validate_response(response, checks=CHECKS)

    run()


def test_schemathesis_finds_nothing_and_the_host_is_left_quiet(server: Server) -> None:
    before = quiet(server)
    assert all(before["generations"].values()), before  # every worker is up
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    counts: Counter[str] = Counter()
    statuses: Statuses = Counter()
    for operation in operations:
        fuzz(operation, GenerationMode.POSITIVE, server.url, counts, statuses)
        if operation.method.upper() == "POST":  # a GET here takes nothing to get wrong
            fuzz(operation, GenerationMode.NEGATIVE, server.url, counts, statuses)
    print(f"schemathesis: {len(operations)} operations, {sum(counts.values())} cases", counts)
    print("statuses:", sorted(statuses.items()))
    # Many positive cases reach a model, not only the refusals in front of one
    # (the rest: empty texts, token ids out of range, sizes the model lacks).
    positive = sum(n for (mode, _), n in statuses.items() if mode is GenerationMode.POSITIVE)
    assert statuses[GenerationMode.POSITIVE, 200] > positive // 5, statuses
    assert {label.split(" ", 1)[1] for label in counts} == {op.label for op in operations}
    assert len(operations) >= 13  # what the document held when this was written
    with server.client() as client:
        assert client.get("/health").status_code == 200
    assert quiet(server) == {**before, "leases": 0, "inflight": 0, "waiting": 0}
    assert server.proc.poll() is None
