"""The tiny reference models served: through a host and real worker processes,
through the HTTP routes (in process) and from the catalog.

Refusals over the ceiling (with the index, or an explicit cut with
``truncate``), prompts by name, cross-encoder scores and their logits
(``raw_scores``), and the catalog saying which rerank models are cross-encoders.
"""

from __future__ import annotations

import functools
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.frontend import OFFLOAD_CHARS
from synapse_core.testing import host_config, model_entry
from synapse_models import model as runtime
from synapse_models.testing import TINY

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

REFERENCE: dict[str, Any] = json.loads((TINY / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def tiny(name: str, task: str | None = None, **options: Any) -> dict[str, Any]:
    """A catalog entry of the tiny model folder ``name``: only the folder is named."""
    kind = REFERENCE[name]["kind"] if task is None else task
    return model_entry(
        name,
        task=kind,
        transport="cpu",
        ceiling=512,  # more than the folder's: the folder's max_seq_length caps it
        model_dir=str(TINY / name),
        **options,
    )


def host(cfg: synapse.HostConfig) -> Any:
    return synapse.open_host(cfg, plugins=[synapse_cpu.plugin])


def deadline() -> synapse.Deadline:
    return synapse.Deadline.after(DEADLINE_S)


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def runtime_options(runtime: str, cache: Path) -> dict[str, Any]:
    if runtime == "onnxruntime":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
        return {"runtime": runtime, "cache_dir": str(cache)}
    return {"runtime": "numpy"}  # named: onnxruntime is the default


@asyncio_only
@pytest.mark.parametrize("runtime", ["numpy", "onnxruntime"])
async def test_every_tiny_model_is_served_as_its_reference(runtime: str, onnx_cache: Path) -> None:
    options = runtime_options(runtime, onnx_cache)
    async with host(config(*(tiny(name, **options) for name in REFERENCE))) as h:
        for name, ref in REFERENCE.items():
            entry = h.catalog.entry(name, ref["kind"])
            assert entry.ceiling == 128 and entry.buckets == (32, 64, 128)
            if ref["kind"] == "embed":
                result = await h.embed(name, ref["texts"], deadline=deadline(), truncate=True)
                assert cosines(result.vectors, ref["vectors"]).min() >= 0.99999, name
                lengths = np.linalg.norm(np.array(result.vectors), axis=1)
                expected = np.linalg.norm(np.array(ref["vectors"]), axis=1)
                assert np.abs(lengths / expected - 1).max() <= 1e-5, name
                assert result.identity.endswith(f":{runtime}")
            else:
                for (q, d), score, raw in zip(
                    ref["pairs"], ref["scores"], ref["raw_scores"], strict=True
                ):
                    ranked = await h.rerank(name, q, [d], deadline=deadline())
                    assert abs(ranked.scores[0] - score) <= 1e-5, name
                    assert abs(ranked.raw_scores[0] - raw) <= 1e-5, name
                assert entry.traits.scorer == "cross-encoder"


async def test_a_text_over_the_ceiling_is_refused_with_its_index_or_cut_on_request() -> None:
    ref = REFERENCE["xlmr-mean"]
    longest = max(range(len(ref["texts"])), key=lambda i: ref["tokens"][i])
    assert ref["tokens"][longest] > 128
    async with host(config(tiny("xlmr-mean"))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("xlmr-mean", ref["texts"], deadline=deadline())
        assert refused.value.code == "over-ceiling" and refused.value.index == longest
        cut = await h.embed("xlmr-mean", [ref["texts"][longest]], truncate=True)
    assert cut.truncated == (0,)
    assert cosines(cut.vectors, [ref["vectors"][longest]]).min() >= 0.99999


@pytest.mark.parametrize("count", [20, 200])  # planned on the event loop; in a thread
async def test_a_call_of_many_texts_is_tokenised_once_per_text(
    count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane's tokenizer cannot count without encoding, so a call is
    encoded once while planned (in batches) and its ids are sent as they are."""
    texts = [f"text {i}: " + "alpha beta gamma delta " * 4 for i in range(count)]
    large = sum(map(len, texts)) > OFFLOAD_CHARS
    assert large == (count == 200)
    async with host(config(tiny("bert-cls", runtime="numpy"))) as h:
        tokenizer = h.catalog.entries["bert-cls"].tokenizer
        assert not hasattr(tokenizer, "count")
        seen: Counter[str] = Counter()
        batches: list[int] = []
        encode, encode_batch = tokenizer.encode, tokenizer.encode_batch

        def encode_one(text: str) -> list[int]:
            seen[text] += 1
            return encode(text)

        def encode_many(many: list[str]) -> list[list[int]]:
            seen.update(many)
            batches.append(len(many))
            return encode_batch(many)

        monkeypatch.setattr(tokenizer, "encode", encode_one)
        monkeypatch.setattr(tokenizer, "encode_batch", encode_many)
        result = await h.embed("bert-cls", texts, deadline=deadline())
        monkeypatch.undo()
        alone = await h.embed("bert-cls", texts[-1:], deadline=deadline())
    assert seen == Counter(texts)
    assert sum(batches) == count
    assert cosines(result.vectors[-1:], alone.vectors).min() >= 0.99999


@asyncio_only
async def test_a_folders_prompts_are_prompt_names_of_the_python_api() -> None:
    ref = REFERENCE["xlmr-mean"]
    async with host(config(tiny("xlmr-mean"))) as h:
        assert h.catalog.entries["xlmr-mean"].spec.prompts == ref["prompts"]
        for name in ref["prompts"]:
            result = await h.embed("xlmr-mean", ref["texts"][:4], prompt_name=name)
            assert cosines(result.vectors, ref["prompted"][name]).min() >= 0.99999
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("xlmr-mean", ["x"], prompt_name="document")
    assert refused.value.code == "unknown-prompt"
    assert "its prompts: 'passage', 'query'" in refused.value.message


@asyncio_only
async def test_a_pair_over_the_ceiling_is_refused_or_its_document_cut() -> None:
    ref = REFERENCE["bert-rerank"]
    query, short = ref["pairs"][0]
    long_doc = " ".join([short] * 20)  # far past 128 tokens with the query
    async with host(config(tiny("bert-rerank"))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.rerank("bert-rerank", query, [short, long_doc], deadline=deadline())
        assert refused.value.code == "over-ceiling" and refused.value.index == 1
        assert "with the query" in refused.value.message
        cut = await h.rerank("bert-rerank", query, [short, long_doc], truncate=True)
        tokenizer = h.catalog.entries["bert-rerank"].tokenizer
    assert cut.truncated == (1,)
    assert abs(cut.scores[0] - ref["scores"][0]) <= 1e-5
    # The document was cut to fit with the whole query: [CLS] q [SEP] d [SEP] is 128.
    q, d = len(tokenizer.encode(query)), len(tokenizer.encode(long_doc))
    assert tokenizer.positions(d, q) > 128
    runner = runtime.load(str(TINY / "bert-rerank"))
    kept = runner.tokenizer.encode(long_doc)[: 128 - 3 - q]
    expected = runner.rerank(runner.tokenizer.encode(query), [kept])[0]
    assert abs(cut.raw_scores[1] - float(expected)) <= 1e-5
    assert 0.0 < cut.scores[1] < 1.0


@asyncio_only
async def test_a_sentence_transformer_folder_reranks_as_a_bi_encoder() -> None:
    async with host(config(tiny("mpnet-mean"), tiny("mpnet-mean", "rerank") | {"name": "bi"})) as h:
        assert h.catalog.entries["bi"].traits.scorer == "bi-encoder"
        query, docs = "What is the capital of France?", ["Paris is in France.", "pizza"]
        ranked = await h.rerank("bi", query, docs, deadline=deadline())
        vectors = np.array((await h.embed("mpnet-mean", [query, *docs])).vectors)
    assert np.allclose(ranked.scores, vectors[1:] @ vectors[0], atol=1e-6)
    assert ranked.raw_scores == ranked.scores


@asyncio_only
async def test_a_cross_encoder_as_an_embed_model_is_unavailable_and_others_serve() -> None:
    async with host(config(tiny("bert-rerank", "embed"), tiny("bert-cls"))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("bert-rerank", ["hello"])
        assert refused.value.code == "transport-unavailable"
        message = refused.value.message
        assert "a cross-encoder (bert, ForSequenceClassification) scores pairs" in message
        assert 'give it task = "rerank"' in message
        assert len((await h.embed("bert-cls", ["hello"], deadline=deadline())).vectors[0]) == 64


@asyncio_only
async def test_an_unsupported_folder_is_unavailable_naming_the_file_and_others_serve(
    tmp_path: Path,
) -> None:
    import shutil

    root = tmp_path / "gpt"
    shutil.copytree(TINY / "bert-cls", root)
    config_json = root / "config.json"
    config_json.write_text(json.dumps(json.loads(config_json.read_text()) | {"model_type": "gpt2"}))
    other = tiny("bert-cls") | {"name": "gpt", "options": {"model_dir": str(root)}}
    async with host(config(other, tiny("mpnet-mean"))) as h:
        assert h.catalog.entries["gpt"].problem
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("gpt", ["hello"])
        assert len((await h.embed("mpnet-mean", ["hello"], deadline=deadline())).vectors) == 1
    assert refused.value.code == "transport-unavailable"
    assert f"{config_json}: model_type 'gpt2' is not supported; supported: bert" in (
        refused.value.message
    )


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@asyncio_only
async def test_http_routes_serve_cross_encoder_scores_logits_and_prompts() -> None:
    pytest.importorskip("synapse_http")
    import httpx

    from synapse_http import create_app

    rerank_ref, embed_ref = REFERENCE["xlmr-rerank"], REFERENCE["xlmr-mean"]
    query = rerank_ref["pairs"][4][0]
    doc = rerank_ref["pairs"][4][1]
    async with host(config(tiny("xlmr-mean"), tiny("xlmr-rerank"))) as h:
        transport = httpx.ASGITransport(app=create_app(h))
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            body = {"query": query, "texts": [doc]}
            scores = (await http.post("/rerank?model=xlmr-rerank", json=body)).json()
            raw_body = body | {"raw_scores": True}
            raw = (await http.post("/rerank?model=xlmr-rerank", json=raw_body)).json()
            cohere = await http.post(
                "/v1/rerank", json={"model": "xlmr-rerank", "query": query, "documents": [doc]}
            )
            v2 = await http.post(
                "/v2/rerank", json={"model": "xlmr-rerank", "query": query, "documents": [doc]}
            )
            prompted = await http.post(
                "/embed?model=xlmr-mean",
                json={"inputs": embed_ref["texts"][:4], "prompt_name": "query"},
            )
            openai = await http.post(
                "/v1/embeddings", json={"model": "xlmr-mean", "input": embed_ref["texts"][:2]}
            )
            info = (await http.get("/info?model=xlmr-rerank")).json()
            embed_info = (await http.get("/info?model=xlmr-mean")).json()
    assert abs(scores[0]["score"] - rerank_ref["scores"][4]) <= 1e-5
    assert abs(raw[0]["score"] - rerank_ref["raw_scores"][4]) <= 1e-5
    assert abs(cohere.json()["results"][0]["relevance_score"] - rerank_ref["scores"][4]) <= 1e-5
    assert abs(v2.json()["results"][0]["relevance_score"] - rerank_ref["scores"][4]) <= 1e-5
    assert cosines(prompted.json(), embed_ref["prompted"]["query"]).min() >= 0.99999
    vectors = [item["embedding"] for item in openai.json()["data"]]
    assert cosines(vectors, embed_ref["vectors"][:2]).min() >= 0.99999
    assert info["model_type"]["reranker"]["scorer"] == "cross-encoder"
    assert embed_info["model_type"] == {"embedding": {"pooling": "mean"}}


@asyncio_only
async def test_a_folders_default_prompt_is_applied_by_serve_when_none_is_named(
    tmp_path: Path,
) -> None:
    pytest.importorskip("synapse_http")
    import shutil

    import httpx

    from synapse_http import create_app

    ref = REFERENCE["xlmr-mean"]
    root = tmp_path / "e5"
    shutil.copytree(TINY / "xlmr-mean", root)
    st_config = root / "config_sentence_transformers.json"
    data = json.loads(st_config.read_text()) | {"default_prompt_name": "passage"}
    st_config.write_text(json.dumps(data))
    entry = tiny("xlmr-mean") | {"name": "e5", "options": {"model_dir": str(root)}}
    async with host(config(entry)) as h:
        assert h.catalog.entries["e5"].traits.default_prompt == "passage"
        plain = await h.embed("e5", ref["texts"][:4])  # the Python API: only when named
        transport = httpx.ASGITransport(app=create_app(h))
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            served = await http.post("/embed?model=e5", json={"inputs": ref["texts"][:4]})
            named = await http.post(
                "/embed?model=e5", json={"inputs": ref["texts"][:4], "prompt_name": "query"}
            )
    assert cosines(plain.vectors, ref["vectors"][:4]).min() >= 0.99999
    assert cosines(served.json(), ref["prompted"]["passage"]).min() >= 0.99999
    assert cosines(named.json(), ref["prompted"]["query"]).min() >= 0.99999


def test_an_int8_cross_encoder_reports_its_worst_score_difference(
    tmp_path: Path,
) -> None:
    """A cross-encoder's one logit has no cosine: its int8 loss is the worst
    score difference to float32, in the model, the catalog note and /info's
    conversion."""
    pytest.importorskip("onnxruntime")
    from synapse_core.plugin import ModelSpec

    folder = str(TINY / "bert-rerank")
    exact = runtime.load(folder, runtime="onnxruntime", cache_dir=str(tmp_path))
    int8 = runtime.load(folder, quantize="int8", cache_dir=str(tmp_path))
    assert int8.min_cosine is None and int8.max_score_delta is not None
    encode = int8.tokenizer.encode
    pairs = [("what is a host", "a serving host"), ("café", "a brain junction")]
    deltas = [
        abs(float(exact.rerank(encode(q), [encode(d)])[0] - int8.rerank(encode(q), [encode(d)])[0]))
        for q, d in pairs
    ]
    assert max(deltas) < 0.5
    options = {"model_dir": folder, "quantize": "int8", "cache_dir": str(tmp_path)}
    spec = ModelSpec(
        name="r", task="rerank", transport="cpu", package="r", ceiling=128, options=options
    )
    transport = synapse_cpu.plugin.CpuTransport()
    conversion = transport.model_conversion(spec)
    assert conversion is not None and conversion.max_score_delta == int8.max_score_delta
    assert "worst score (logit) difference to float32" in transport.model_note(spec)
