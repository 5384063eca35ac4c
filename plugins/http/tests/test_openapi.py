"""``/openapi.json`` is generated from the route table and the Structs that
decode the bodies, and describes what the routes really answer; ``/docs``
serves Swagger UI. In-process, both anyio backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import msgspec
import pytest

import synapse_core as synapse
from synapse_core.testing import host_config, transport_plugin
from synapse_http import ServeSettings, create_app
from synapse_http.app import ROUTES
from synapse_http.openapi import REF
from synapse_http.pipeline import PostRoute
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio
KEY = {"Authorization": "Bearer secret"}


@asynccontextmanager
async def client(api_key: str | None = "secret") -> AsyncIterator[httpx.AsyncClient]:
    plugins = [transport_plugin(InProcessTransport())]
    cfg = host_config(model("e"), model("r", task="rerank"))
    async with synapse.open_host(cfg, plugins=plugins) as host:
        app = create_app(host, ServeSettings(api_key=api_key))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            yield http


async def test_every_route_is_described_with_the_schemas_of_its_structs() -> None:
    async with client() as http:
        answer = await http.get("/openapi.json")  # no key needed
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    doc = answer.json()
    assert doc["openapi"] == "3.1.0"
    components = doc["components"]["schemas"]
    for route in ROUTES:
        for method in route.methods - {"HEAD"}:  # type: ignore[operator]
            assert method.lower() in doc["paths"][route.path], (route.path, method)
        endpoint = route.endpoint
        if isinstance(endpoint, PostRoute):
            operation = doc["paths"][route.path]["post"]
            request = operation["requestBody"]["content"]["application/json"]["schema"]
            # The same schema msgspec derives from the Struct that decodes the body.
            (schema,), derived = msgspec.json.schema_components([endpoint.schema], ref_template=REF)
            assert request == schema
            for name, component in derived.items():
                assert components[name] == component
            assert {"200", "404", "413", "422", "429", "500", "503", "504"} <= set(
                operation["responses"]
            )
    # Every reference resolves.
    text = msgspec.json.encode(doc).decode()
    for name in {part.split('"')[0] for part in text.split("#/components/schemas/")[1:]}:
        assert name in components, name
    # The key is asked for everywhere but on the open routes.
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert doc["paths"]["/health"]["get"]["security"] == []
    assert "401" in doc["paths"]["/embed"]["post"]["responses"]
    # Where a route reads the model's name and deadline besides its body.
    named = {(p["in"], p["name"]) for p in doc["paths"]["/embed"]["post"]["parameters"]}
    assert named == {
        ("query", "model"),
        ("header", "X-Synapse-Model"),
        ("header", "X-Synapse-Timeout-Ms"),
    }
    info = {(p["in"], p["name"]) for p in doc["paths"]["/info"]["get"]["parameters"]}
    assert info == {("query", "model"), ("header", "X-Synapse-Model")}
    root = doc["paths"]["/"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert root == {
        "anyOf": [
            {"$ref": "#/components/schemas/EmbedRequest"},
            {"$ref": "#/components/schemas/RerankRequest"},
        ]
    }


def _schema(doc: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any]:
    response = doc["paths"][path][method]["responses"][str(status)]
    schema: dict[str, Any] = response["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rpartition("/")[2]]
    return schema


def _fits(body: dict[str, Any], schema: dict[str, Any]) -> bool:
    """The body's keys are the schema's properties, with every required one."""
    return set(body) <= set(schema["properties"]) and set(schema.get("required", ())) <= set(body)


async def test_answers_and_errors_have_the_documented_shapes() -> None:
    async with client() as http:
        doc = (await http.get("/openapi.json")).json()
        v2 = await http.post(
            "/v2/rerank", json={"query": "q", "documents": ["a", "b"]}, headers=KEY
        )
        assert _fits(v2.json(), _schema(doc, "/v2/rerank", "post", 200))
        info = await http.get("/info", headers=KEY)
        assert _fits(info.json(), _schema(doc, "/info", "get", 200))
        refused = await http.post("/embed", json={"inputs": [[1, -1]]}, headers=KEY)
        assert refused.status_code == 422
        assert _fits(refused.json(), _schema(doc, "/embed", "post", 422))
        openai = await http.post("/v1/embeddings", json={"input": ""}, headers=KEY)
        assert openai.status_code == 422
        envelope = _schema(doc, "/v1/embeddings", "post", 422)
        assert _fits(openai.json(), envelope)
        inner = doc["components"]["schemas"]["OpenAIError"]
        assert _fits(openai.json()["error"], inner)
        unauthorized = await http.post("/v2/rerank", json={})
        assert unauthorized.status_code == 401
        assert _fits(unauthorized.json(), _schema(doc, "/v2/rerank", "post", 401))


async def test_without_a_key_the_document_asks_for_none() -> None:
    async with client(api_key=None) as http:
        doc = (await http.get("/openapi.json")).json()
    assert "security" not in doc and "securitySchemes" not in doc["components"]


async def test_docs_serves_swagger_ui_reading_the_document() -> None:
    async with client() as http:
        page = await http.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "swagger-ui" in page.text and 'url: "openapi.json"' in page.text
