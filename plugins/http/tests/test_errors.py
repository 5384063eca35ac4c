"""Every documented error, produced on purpose on a real server: status,
``error_type`` and the index or field at fault. Both backends."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from synapse_http.testing import API_KEY, Server, metric, model

# The servers run synapse_mock_transport's workers: without it, this module is skipped.
pytestmark = pytest.mark.subprocess

MODELS = [
    model("e"),
    model("r", task="rerank"),
    # Slow replies: for deadlines and disconnects.
    model("slow", faults={"reply_delay_s": 1.5}),
    # The first generation crashes on its first inference (the request was sent).
    model("crash-infer", faults={"crash_on_infer": 1, "only_generation": 1}),
    # The first generation crashes admitting its first shape (no inference sent).
    model("crash-admit", faults={"crash_on_admit": 1, "only_generation": 1}),
]
ARGS = ("--api-key", API_KEY, "--max-body-bytes", "4096", "--max-inputs", "8")


def check(response: httpx.Response, status: int, error_type: str, **fields: Any) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert body["error_type"] == error_type and body["error"], body
    assert "Traceback" not in response.text
    for key, value in fields.items():
        assert body.get(key) == value, (key, body)
    return body


LONG = " ".join(["w"] * 20)


@pytest.mark.parametrize(
    ("route", "payload", "error_type", "index"),
    [
        ("/embed", {"inputs": ["a", LONG]}, "over-ceiling", 1),
        ("/embed", {"inputs": []}, "empty-input", None),
        ("/embed", {"inputs": ["a", "b", "  "]}, "empty-sequence", 2),
        ("/embed?model=r", {"inputs": ["a"]}, "wrong-task", None),
        ("/rerank", {"query": "q", "texts": ["ok", LONG]}, "over-ceiling", 1),
        ("/rerank", {"query": "q", "texts": ["", "x"]}, "empty-sequence", 0),
        ("/v1/rerank", {"query": "q", "documents": ["x", LONG]}, "over-ceiling", 1),
    ],
)
def test_refusals_are_422_with_their_code_and_index(
    http: httpx.Client, route: str, payload: dict[str, Any], error_type: str, index: int | None
) -> None:
    body = check(http.post(route, json=payload), 422, error_type)
    assert body.get("index") == index


def test_refusal_on_an_openai_route_uses_openai_envelope(http: httpx.Client) -> None:
    response = http.post("/v1/embeddings", json={"model": "e", "input": ["a", LONG]})
    assert response.status_code == 422
    error = response.json()["error"]
    assert (error["type"], error["code"], error["error_type"]) == ("over-ceiling",) * 3
    assert error["index"] == 1 and "ceiling" in error["message"]


def test_unknown_model_is_404(http: httpx.Client) -> None:
    check(http.post("/embed?model=nope", json={"inputs": ["a"]}), 404, "unknown-model")
    response = http.post("/v1/embeddings", json={"model": "nope", "input": "a"})
    assert response.status_code == 404 and response.json()["error"]["type"] == "unknown-model"


def test_body_over_the_limit_and_too_many_inputs_are_413(http: httpx.Client) -> None:
    big = {"inputs": ["x" * 5000]}
    check(http.post("/embed", json=big), 413, "payload-too-large")
    # Without Content-Length (chunked): refused once the bytes read pass the limit.
    chunks = iter([json.dumps(big).encode()[:3000], json.dumps(big).encode()[3000:]])
    streamed = http.post("/embed", content=chunks, headers={"content-type": "application/json"})
    check(streamed, 413, "payload-too-large")
    check(http.post("/embed", json={"inputs": ["a"] * 9}), 413, "too-many-inputs")
    check(http.post("/rerank", json={"query": "q", "texts": ["a"] * 9}), 413, "too-many-inputs")


@pytest.mark.parametrize(
    ("route", "content", "field"),
    [
        ("/embed", b'{"inputs": ["a",', "$"),
        ("/embed", b'{"inputs": ["a"], "normalize": "yes"}', "$.normalize"),
        ("/embed", b'{"inputs": ["a", 3]}', "$.inputs[1]"),
        ("/embed", b"{}", "$"),
        ("/rerank", b'{"query": "q", "texts": ["a", {"t": 1}]}', "$.texts[1]"),
        ("/v1/rerank", b'{"query": "q", "documents": ["a"], "top_n": 0}', "$.top_n"),
        ("/embed", b'{"inputs": "a", "truncation_direction": "Up"}', "$.truncation_direction"),
    ],
)
def test_malformed_bodies_are_422_naming_the_field(
    http: httpx.Client, route: str, content: bytes, field: str
) -> None:
    response = http.post(route, content=content, headers={"content-type": "application/json"})
    body = check(response, 422, "invalid-body", field=field)
    assert field in body["error"]


def test_missing_or_wrong_api_key_is_401_and_health_needs_none(server: Server) -> None:
    missing = httpx.post(server.url + "/embed", json={"inputs": ["a"]})
    check(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = httpx.post(
        server.url + "/embed", json={"inputs": ["a"]}, headers={"Authorization": "Bearer nope"}
    )
    check(wrong, 401, "unauthorized")
    assert httpx.get(server.url + "/metrics").status_code == 401
    assert httpx.get(server.url + "/health").status_code == 200


def test_deadline_is_the_shorter_of_header_and_timeout_and_gives_504(http: httpx.Client) -> None:
    response = http.post(
        "/embed?model=slow", json={"inputs": ["a"]}, headers={"X-Synapse-Timeout-Ms": "200"}
    )
    check(response, 504, "deadline-exceeded")
    bad = http.post("/embed", json={"inputs": ["a"]}, headers={"X-Synapse-Timeout-Ms": "soon"})
    check(bad, 422, "invalid-header", field="X-Synapse-Timeout-Ms")


def test_a_bulk_call_past_its_deadline_says_how_to_raise_the_timeout(http: httpx.Client) -> None:
    """Issue 42: a 2,048-text bulk on the shipped MiniLM takes about 28 s
    against the 30 s default. The deadline stays absolute (docs/http.md):
    its 504 says which header and which server option give a call longer."""
    response = http.post(
        "/embed?model=slow",
        json={"inputs": [f"text {i}" for i in range(8)]},  # the most this server takes
        headers={"X-Synapse-Timeout-Ms": "200"},
    )
    body = check(response, 504, "deadline-exceeded")
    assert "raise the request's X-Synapse-Timeout-Ms" in body["error"]
    assert "--request-timeout" in body["error"]


def test_worker_faults_are_503_saying_whether_the_request_may_have_run(
    http: httpx.Client, server: Server
) -> None:
    unknown = check(
        http.post("/embed?model=crash-infer", json={"inputs": ["a"]}),
        503,
        "outcome-unknown",
        may_have_run=True,
    )
    assert "did not retry" in unknown["error"]
    check(
        http.post("/embed?model=crash-admit", json={"inputs": ["a"]}),
        503,
        "worker-fault",
        may_have_run=False,
    )
    # The replacement generation serves; exactly one restart each.
    for name in ("crash-infer", "crash-admit"):
        assert http.post(f"/embed?model={name}", json={"inputs": ["a"]}).status_code == 200
        text = server.metrics()
        assert metric(text, "synapse_worker_restarts_total", model=name) == [1.0]
        assert metric(text, "synapse_worker_generation", model=name) == [2.0]
    text = server.metrics()
    assert metric(text, "synapse_worker_faults_total", error_type="outcome-unknown") == [1.0]
    assert metric(text, "synapse_worker_faults_total", error_type="worker-fault") == [1.0]


def test_unknown_routes_and_methods_are_json_errors(http: httpx.Client) -> None:
    check(http.get("/nope"), 404, "not-found")
    check(http.get("/embed"), 405, "method-not-allowed")


def test_a_client_that_disconnects_cancels_its_call_without_a_restart(server: Server) -> None:
    with server.client() as http:
        assert http.post("/embed?model=slow", json={"inputs": ["warm"]}).status_code == 200
        before = server.metrics()
    pid = metric(before, "synapse_worker_pid", model="slow")
    with server.client(timeout=0.3) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.post("/embed?model=slow", json={"inputs": ["gone"]})  # closes on timeout
    # The server notices, cancels the call, and the host drains the reply.
    with server.client() as http:
        after = wait_for(
            server,
            lambda text: (
                metric(text, "synapse_http_requests_total", route="/embed", status="499") == [1.0]
                and metric(text, "synapse_worker_inflight", model="slow") == [0.0]
            ),
        )
        assert metric(after, "synapse_worker_restarts_total", model="slow") == [0.0]
        assert metric(after, "synapse_worker_leases", model="slow") == [0.0]
        assert metric(after, "synapse_worker_pid", model="slow") == pid
        assert http.post("/embed?model=slow", json={"inputs": ["again"]}).status_code == 200


def wait_for(server: Server, predicate: Callable[[str], bool], timeout: float = 15.0) -> str:
    """Scrape /metrics until ``predicate`` holds (nothing else signals it)."""
    done = threading.Event()
    text = server.metrics()
    while not predicate(text):
        if done.wait(0.05) or timeout <= 0:
            pytest.fail("metrics never showed the expected state:\n" + text)
        timeout -= 0.05
        text = server.metrics()
    return text


def test_overload_is_429_with_retry_after(serve: Callable[..., Server], anyio_backend: str) -> None:
    server = serve(
        anyio_backend,
        [model("slow", faults={"reply_delay_s": 0.5})],
        "--api-key",
        API_KEY,
        max_concurrent=1,
        max_waiting=1,
    )
    statuses: list[httpx.Response] = []
    with server.client() as http:
        assert http.post("/embed", json={"inputs": ["warm"]}).status_code == 200

    def call() -> None:
        with server.client() as http:
            statuses.append(http.post("/embed", json={"inputs": ["a"]}))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    codes = sorted(r.status_code for r in statuses)
    assert codes.count(429) >= 1 and codes.count(200) >= 1 and set(codes) <= {200, 429}
    refused = next(r for r in statuses if r.status_code == 429)
    check(refused, 429, "overloaded")
    assert refused.headers["retry-after"] == "1"
