"""Two replicas on a local Ray instance, through Serve's HTTP proxy on loopback:
the same vectors as a plain host, requests routed to the replica holding
their model, Ray's LRU unloading through retirement, capacity refusals as 503."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import openai
import pytest

from synapse_core import HostConfig, open_host
from synapse_ray.testing import BOUND_S, ServeApp, alive, mock_model

pytestmark = pytest.mark.ray

#: replicas, and models each may hold before Ray's LRU retires one
REPLICAS = 2
MAX_MODELS = 2
ARGS = {"num_replicas": str(REPLICAS), "max_models_per_replica": str(MAX_MODELS)}
TEXTS = ["a serving host", "the brain junction", "one more text"]
#: more models than the replicas may hold together
SPREAD = ["s1", "s2", "s3", "s4", "s5"]


def catalog(trace: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    models = [mock_model("a"), mock_model("b")]
    models += [mock_model(name, trace=trace) for name in SPREAD]
    # 64 x 16 = 1024 units, more than the lane has: refused, never admitted
    models.append(mock_model("huge", buckets=[64], max_batch=16))
    return models, {"lanes": {"mock:0": {"capacity": 512}}}


def plain_vectors(app: ServeApp, model: str) -> list[list[float]]:
    """What a host opened in this process answers for ``TEXTS``."""

    async def embed() -> list[list[float]]:
        async with open_host(HostConfig.from_toml(app.catalog)) as host:
            return (await host.embed(model, TEXTS)).vectors

    return anyio.run(embed)


def test_openai_client_through_serve_matches_a_plain_host(serve_app: ServeApp) -> None:
    client = openai.OpenAI(
        base_url=f"{serve_app.url}/v1", api_key="unused", max_retries=0, timeout=BOUND_S
    )
    answer = client.embeddings.create(
        model="a",
        input=TEXTS,
        encoding_format="float",
        extra_headers=serve_app.headers("a"),
    )
    assert [d.embedding for d in answer.data] == plain_vectors(serve_app, "a")


def test_tei_embed_through_serve_matches_a_plain_host(serve_app: ServeApp) -> None:
    answer = httpx.post(
        f"{serve_app.url}/embed",
        params={"model": "b"},
        json={"inputs": TEXTS, "normalize": False},
        headers=serve_app.headers("b"),
        timeout=BOUND_S,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == plain_vectors(serve_app, "b")


def test_requests_for_a_model_go_to_the_replica_holding_it(serve_app: ServeApp) -> None:
    answers = [serve_app.embed("a", [f"text {i}"]) for i in range(8)]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    holder = serve_app.holder("a")
    assert "a" in holder["workers"]
    assert {a.headers["x-synapse-replica"] for a in answers} == {holder["replica"]}
    # The holder's own metrics counted them (each replica serves its own /metrics).
    metrics = httpx.get(f"{serve_app.url}/metrics", headers=serve_app.headers("a"), timeout=BOUND_S)
    assert metrics.headers["x-synapse-replica"] == holder["replica"]
    assert 'synapse_http_requests_total{route="/v1/embeddings",status="200"}' in metrics.text


def test_ray_lru_unloads_by_retiring_the_worker(serve_app: ServeApp) -> None:
    pids: dict[str, int] = {}
    for model in SPREAD:
        answer = serve_app.embed(model)
        assert answer.status_code == 200, answer.text
        pids[model] = serve_app.holder(model)["workers"][model]
    # Five models, room for four: Ray unloaded at least one, and unloading is
    # a retirement, so the host asked that worker to stop and saw it exit.
    gone = {model for model, pid in pids.items() if not alive(pid)}
    assert len(gone) >= len(SPREAD) - REPLICAS * MAX_MODELS
    assert {pids[model] for model in gone} <= serve_app.politely_stopped()


@pytest.mark.parametrize(
    ("model", "status", "error_type"),
    [("huge", 503, "capacity-exhausted"), ("nope", 404, "unknown-model")],
)
def test_refusals_answer_as_synapse_serve_does(
    serve_app: ServeApp, model: str, status: int, error_type: str
) -> None:
    # huge: its shape needs more units than the lane has (CapacityExhausted)
    answer = serve_app.embed(model)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["type"] == error_type  # OpenAI's error shape
