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
from synapse_http.schemas import MAX_INPUTS
from synapse_http.testing import model
from synapse_mock_transport.inprocess import InProcessTransport

pytestmark = pytest.mark.anyio
KEY = {"Authorization": "Bearer secret"}


@asynccontextmanager
async def client(
    api_key: str | None = "secret",
    max_inputs: int = ServeSettings().max_inputs,
    models: list[dict[str, Any]] | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    plugins = [transport_plugin(InProcessTransport())]
    cfg = host_config(*(models or [model("e")]), model("r", task="rerank"))
    async with synapse.open_host(cfg, plugins=plugins) as host:
        app = create_app(host, ServeSettings(api_key=api_key, max_inputs=max_inputs))
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
            # The same schema msgspec derives from the Struct that decodes the body,
            # but for what the server adds (below).
            (schema,), derived = msgspec.json.schema_components([endpoint.schema], ref_template=REF)
            assert request == schema
            for name, component in derived.items():
                assert _struct_part(components[name]) == _struct_part(component), name
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
            {"$ref": "#/components/schemas/PredictRequest"},
        ]
    }
    # /predict answers one input's labels, or a list of them per input.
    predicted = doc["paths"]["/predict"]["post"]["responses"]["200"]["content"]
    labels = {"type": "array", "items": {"$ref": "#/components/schemas/Prediction"}}
    assert predicted["application/json"]["schema"] == {
        "anyOf": [labels, {"type": "array", "items": labels}]
    }


def _struct_part(schema: Any) -> Any:
    """``schema`` without what the document adds to a Struct's: the served
    model and prompt names, and the limit on inputs."""
    if isinstance(schema, list):
        return [_struct_part(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    dropped = {MAX_INPUTS, "maxItems", "model", "prompt_name"}
    return {k: _struct_part(v) for k, v in schema.items() if k not in dropped}


def _property(doc: dict[str, Any], struct: str, name: str) -> Any:
    return doc["components"]["schemas"][struct]["properties"][name]


async def test_the_document_names_the_served_models_prompts_and_input_limit() -> None:
    """What a schema can say of this server, it says: a model name of a
    route's task (``enum``), a prompt name of a served model, and at most
    ``--max-inputs`` inputs; texts and token arrays are never empty."""
    prompts = {"query": "query: ", "passage": "passage: "}
    async with client(max_inputs=7, models=[{**model("e"), "prompts": prompts}]) as http:
        doc = (await http.get("/openapi.json")).json()
    text = msgspec.json.encode(doc).decode()
    assert MAX_INPUTS not in text
    named = {"anyOf": [{"enum": ["e"]}, {"type": "null"}], "default": None}
    assert _property(doc, "EmbeddingsRequest", "model") == named
    rerank = {"anyOf": [{"enum": ["r"]}, {"type": "null"}], "default": None}
    assert _property(doc, "CohereRerankRequest", "model") == rerank
    assert _property(doc, "CohereV2RerankRequest", "model") == rerank
    given = {"anyOf": [{"enum": ["passage", "query"]}, {"type": "null"}], "default": None}
    assert _property(doc, "EmbedRequest", "prompt_name") == given
    assert _property(doc, "TokenizeRequest", "prompt_name") == given
    # A prompt named, the inputs are texts: a prompt cannot go in front of ids.
    embed = doc["components"]["schemas"]["EmbedRequest"]
    assert embed["if"] == {
        "properties": {"prompt_name": given["anyOf"][0]},
        "required": ["prompt_name"],
    }
    one, listed_texts = embed["then"]["properties"]["inputs"]["anyOf"]
    assert one == {"type": "string", "minLength": 1}
    assert listed_texts["items"] == one and listed_texts["maxItems"] == 7
    assert _property(doc, "RerankRequest", "texts")["maxItems"] == 7
    assert _property(doc, "RerankRequest", "query")["minLength"] == 1
    text_or_array, batch = _property(doc, "EmbedRequest", "inputs")["anyOf"]
    assert text_or_array == {"type": "string", "minLength": 1}
    flat, listed = batch["anyOf"]
    assert (flat["minItems"], "maxItems" in flat) == (1, False)  # one input, its ids
    assert (listed["minItems"], listed["maxItems"]) == (1, 7)
    assert flat["items"]["maximum"] == 2**31 - 1


async def test_without_prompts_the_document_takes_no_prompt_name() -> None:
    async with client() as http:
        doc = (await http.get("/openapi.json")).json()
    assert _property(doc, "EmbedRequest", "prompt_name") == {"type": "null", "default": None}
    assert "if" not in doc["components"]["schemas"]["EmbedRequest"]


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


async def test_whole_floats_are_the_integers_the_schema_says_they_are() -> None:
    """JSON Schema counts ``8.0`` as an integer, so the server takes it as 8;
    a float with a fraction is refused naming its field."""
    async with client() as http:
        ints = await http.post("/embed", json={"inputs": [[5, 6]], "dimensions": 8}, headers=KEY)
        whole = {"inputs": [[5.0, 6.0]], "dimensions": 8.0}
        floats = await http.post("/embed", json=whole, headers=KEY)
        assert ints.status_code == 200 and floats.status_code == 200, floats.text
        assert floats.json() == ints.json()
        ranked = await http.post(
            "/v2/rerank", json={"query": "q", "documents": ["a", "b"], "top_n": 1.0}, headers=KEY
        )
        assert ranked.status_code == 200 and len(ranked.json()["results"]) == 1
        for path, body, field in (
            ("/embed", {"inputs": "a", "dimensions": 8.5}, "$.dimensions"),
            ("/embed", {"inputs": [[5, 6.5]]}, "$.inputs[0][1]"),
            ("/v2/rerank", {"query": "q", "documents": ["a"], "top_n": 0.5}, "$.top_n"),
        ):
            refused = await http.post(path, json=body, headers=KEY)
            assert refused.status_code == 422, (body, refused.text)
            assert refused.json()["field"] == field
            assert refused.json()["error_type"] == "invalid-body"
