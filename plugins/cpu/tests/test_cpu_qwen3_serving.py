"""The tiny Qwen3 folders served through a host and real worker processes:
Qwen3-Embedding with its ``query`` instruction prompt, and Qwen3-Reranker
(an LLM reranker) scoring pairs in its prompt, which counts toward the
ceiling."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.testing import catalog_toml, host_config, model_entry
from synapse_models import files
from synapse_models import model as runtime
from synapse_models.families.qwen3 import RERANK_PROMPT
from synapse_models.testing import DATA

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def entry(name: str, task: str, cache: Path, folder: str = "", **extra: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"runtime": "numpy"}
    if runtime.onnxruntime_importable() == "":
        options = {"runtime": "onnxruntime", "cache_dir": str(cache)}
    where = str(TINY2 / (folder or name))
    return model_entry(
        name, task=task, transport="cpu", ceiling=512, model_dir=where, **options, **extra
    )


def host(cfg: synapse.HostConfig) -> Any:
    return synapse.open_host(cfg, plugins=[synapse_cpu.plugin])


def deadline() -> synapse.Deadline:
    return synapse.Deadline.after(DEADLINE_S)


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@asyncio_only
async def test_qwen3_embedding_serves_its_reference_and_query_prompt(onnx_cache: Path) -> None:
    ref = REFERENCE["qwen3-last"]
    async with host(config(entry("qwen3-last", "embed", onnx_cache))) as h:
        assert h.catalog.entries["qwen3-last"].spec.prompts == ref["prompts"]
        result = await h.embed("qwen3-last", ref["texts"], deadline=deadline(), truncate=True)
        assert cosines(result.vectors, ref["vectors"]).min() >= 0.99999
        texts = ref["texts"][: len(ref["prompted"]["query"])]
        prompted = await h.embed("qwen3-last", texts, prompt_name="query", deadline=deadline())
        assert cosines(prompted.vectors, ref["prompted"]["query"]).min() >= 0.99999


@asyncio_only
async def test_qwen3_reranker_scores_pairs_in_its_prompt(onnx_cache: Path) -> None:
    ref = REFERENCE["qwen3-rerank"]
    async with host(config(entry("qwen3-rerank", "rerank", onnx_cache))) as h:
        traits = h.catalog.entries["qwen3-rerank"].traits
        assert traits.scorer == "llm-reranker" and traits.instruction == RERANK_PROMPT.instruction
        for (q, d), score, raw in zip(ref["pairs"], ref["scores"], ref["raw_scores"], strict=True):
            ranked = await h.rerank("qwen3-rerank", q, [d], deadline=deadline())
            assert abs(ranked.scores[0] - score) <= 1e-5
            assert abs(ranked.raw_scores[0] - raw) <= 1e-5
        # The prompt counts toward the ceiling (256): a document that fits
        # alone but not in the prompt is refused, or cut on request.
        query, short = ref["pairs"][0]
        tokenizer = h.catalog.entries["qwen3-rerank"].tokenizer
        q = len(tokenizer.encode(query))
        long_doc = " ".join([short] * 12)
        d = len(tokenizer.encode(long_doc))
        assert q + d < 256 < tokenizer.positions(d, q)
        with pytest.raises(synapse.Refused) as refused:
            await h.rerank("qwen3-rerank", query, [short, long_doc], deadline=deadline())
        assert refused.value.code == "over-ceiling" and refused.value.index == 1
        cut = await h.rerank("qwen3-rerank", query, [short, long_doc], truncate=True)
    assert cut.truncated == (1,)
    assert abs(cut.scores[0] - ref["scores"][0]) <= 1e-5
    runner = runtime.load(str(TINY2 / "qwen3-rerank"), runtime="numpy")
    prompt = runner.framing.pair
    kept = runner.tokenizer.encode(long_doc)[: 256 - prompt - q]
    expected = runner.rerank(runner.tokenizer.encode(query), [kept])[0]
    assert abs(cut.raw_scores[1] - float(expected)) <= 1e-5


#: an instruction in place of the model card's (the catalog's ``options.instruction``)
TOLD = "Given a question, find the passage that names a city"


def yes_minus_no(instruction: str, query: str, document: str) -> float:
    """``logit(yes) - logit(no)`` at the last position of the whole prompt,
    tokenised as one text and run through the body, the logits taken from
    the full (tied) language-model head: not through the served head."""
    located = files.locate(str(TINY2 / "qwen3-rerank"), None)
    layout = files.check_present(located)
    weights = runtime.read_weights(located, layout)
    inner: Any = runtime.layout_tokenizer(located.tokenizer, layout).load()
    template = RERANK_PROMPT.with_instruction(instruction)
    text = f"{template.prefix_text} {query}{template.between} {document}{template.suffix}"
    ids = np.array([inner.encode(text, add_special_tokens=False).ids], dtype=np.int64)
    mask = np.ones(ids.shape, dtype=np.float32)
    hidden = weights.family.hidden_states(weights.body, ids, np.zeros_like(ids), mask)
    logits = hidden[0, -1].astype(np.float64) @ weights.body.word.T.astype(np.float64)
    yes, no = inner.token_to_id("yes"), inner.token_to_id("no")
    return float(logits[yes] - logits[no])


@asyncio_only
async def test_the_catalogs_instruction_reaches_the_host_and_the_worker(onnx_cache: Path) -> None:
    ref = REFERENCE["qwen3-rerank"]
    told = entry("told", "rerank", onnx_cache, "qwen3-rerank", instruction=TOLD)
    cfg = config(entry("qwen3-rerank", "rerank", onnx_cache), told)
    instructed = runtime.load(str(TINY2 / "qwen3-rerank"), runtime="numpy", instruction=TOLD)
    encode = instructed.tokenizer.encode
    async with host(cfg) as h:
        traits = h.catalog.entries["told"].traits
        assert traits.scorer == "llm-reranker" and traits.instruction == TOLD
        # The host counts the prompt the worker packs: the instructed one.
        tokenizer = h.catalog.entries["told"].tokenizer
        for q, d in ref["pairs"]:
            framing = instructed.framing
            whole = [*framing.before, *encode(q), *framing.between, *encode(d)]
            assert tokenizer.sequence_length(encode(d), encode(q)) == len(whole) + len(
                framing.pair_after
            )
        default, changed = [], []
        for q, d in ref["pairs"]:
            default.append(await h.rerank("qwen3-rerank", q, [d], deadline=deadline()))
            changed.append(await h.rerank("told", q, [d], deadline=deadline()))
    assert default[0].identity != changed[0].identity  # another prompt, other scores
    got = np.array([c.raw_scores[0] for c in changed])
    assert np.abs(got - np.array(ref["raw_scores"])).max() > 1e-2  # the instruction matters
    expected = [float(instructed.rerank(encode(q), [encode(d)])[0]) for q, d in ref["pairs"]]
    assert np.abs(got - expected).max() <= 1e-5
    # raw_scores is logit(yes) - logit(no); scores its sigmoid.
    by_hand = [yes_minus_no(TOLD, q, d) for q, d in ref["pairs"]]
    assert np.abs(got - by_hand).max() <= 1e-4
    scores = np.array([c.scores[0] for c in changed])
    assert np.abs(scores - 1.0 / (1.0 + np.exp(-got))).max() <= 1e-6
    assert (
        abs(yes_minus_no(RERANK_PROMPT.instruction, *ref["pairs"][0]) - ref["raw_scores"][0])
        <= 1e-4
    )


@asyncio_only
async def test_info_and_the_catalog_say_llm_reranker_and_the_instruction(
    tmp_path: Path, onnx_cache: Path
) -> None:
    pytest.importorskip("synapse_http")
    import httpx
    from click.testing import CliRunner

    from synapse_core.cli import make_cli
    from synapse_http import create_app

    told = entry("told", "rerank", onnx_cache, "qwen3-rerank", instruction=TOLD)
    embedder = entry("qwen3-last", "embed", onnx_cache)
    wrong = entry("wrong", "embed", onnx_cache, "qwen3-last", instruction=TOLD)
    async with host(config(told, embedder, wrong)) as h:
        # An instruction is an LLM reranker's: on an embedder it is refused.
        refused = h.catalog.entries["wrong"]
        assert not refused.available and "options.instruction" in str(refused.problem)
        transport = httpx.ASGITransport(app=create_app(h))
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            info = (await http.get("/info?model=told")).json()
            embed_info = (await http.get("/info?model=qwen3-last")).json()
    assert info["model_type"]["reranker"]["scorer"] == "llm-reranker"
    assert info["model_type"]["reranker"]["instruction"] == TOLD
    assert embed_info["model_type"] == {"embedding": {"pooling": "lasttoken"}}
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog_toml(told), encoding="utf-8")
    env = {"SYNAPSE_PLUGINS": "cpu", "SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    runner = CliRunner()
    shown = runner.invoke(make_cli(), ["catalog", "--catalog", str(catalog)], env=env)
    assert shown.exit_code == 0, shown.output
    assert "told: LLM reranker" in shown.stdout and f"instruction {TOLD!r}" in shown.stdout
    doc = runner.invoke(make_cli(), ["catalog", "--json", "--catalog", str(catalog)], env=env)
    (model,) = json.loads(doc.stdout)["models"]
    assert model["scorer"] == "llm-reranker" and model["instruction"] == TOLD


@asyncio_only
async def test_the_query_prompt_is_a_prompt_name_everywhere(onnx_cache: Path) -> None:
    """Qwen3-Embedding's instruction prompt (``query``) by name from the Python
    API, ``/embed``, ``/v1/embeddings`` (the ``prompt_name`` body extension,
    as the OpenAI client's ``extra_body`` sends it) and ``synapse embed
    --prompt`` (the next test): each gives the prompted reference."""
    pytest.importorskip("synapse_http")
    import httpx

    from synapse_http import create_app

    ref = REFERENCE["qwen3-last"]
    wanted = ref["prompted"]["query"]
    texts = ref["texts"][: len(wanted)]
    embedder = entry("qwen3-last", "embed", onnx_cache)
    async with host(config(embedder)) as h:
        api = await h.embed("qwen3-last", texts, prompt_name="query", deadline=deadline())
        plain = await h.embed("qwen3-last", texts, deadline=deadline())
        app = create_app(h)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            tei = await http.post(
                "/embed?model=qwen3-last", json={"inputs": texts, "prompt_name": "query"}
            )
            body = {"model": "qwen3-last", "input": texts, "prompt_name": "query"}
            openai_route = await http.post("/v1/embeddings", json=body)
            unknown = await http.post("/v1/embeddings", json=body | {"prompt_name": "nope"})
        try:
            import openai
        except ImportError:
            client_vectors = None
        else:
            client = openai.AsyncOpenAI(
                base_url="http://synapse/v1",
                api_key="unused",
                http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)),
            )
            async with client:
                made = await client.embeddings.create(
                    model="qwen3-last", input=texts, extra_body={"prompt_name": "query"}
                )
            client_vectors = [d.embedding for d in made.data]
    assert cosines(api.vectors, wanted).min() >= 0.99999
    assert cosines(plain.vectors, wanted).min() < 0.999  # the prompt changes the vectors
    assert cosines(tei.json(), wanted).min() >= 0.99999
    assert openai_route.status_code == 200, openai_route.text
    served = [d["embedding"] for d in openai_route.json()["data"]]
    assert cosines(served, wanted).min() >= 0.99999
    assert unknown.status_code == 422 and "unknown-prompt" in unknown.text, unknown.text
    if client_vectors is not None:
        assert cosines(client_vectors, wanted).min() >= 0.99999


def test_synapse_embed_takes_the_query_prompt_by_name(tmp_path: Path, onnx_cache: Path) -> None:
    from click.testing import CliRunner

    from synapse_core.cli import make_cli

    wanted = REFERENCE["qwen3-last"]["prompted"]["query"]
    texts = REFERENCE["qwen3-last"]["texts"][: len(wanted)]
    embedder = entry("qwen3-last", "embed", onnx_cache)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog_toml(embedder), encoding="utf-8")
    env = {"SYNAPSE_PLUGINS": "cpu", "SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    args = ["embed", "qwen3-last", *texts, "--json", "--catalog", str(catalog)]
    prompted = CliRunner().invoke(make_cli(), [*args, "--prompt", "query"], env=env)
    assert prompted.exit_code == 0, prompted.output
    assert cosines(json.loads(prompted.stdout)["vectors"], wanted).min() >= 0.99999
    plain = CliRunner().invoke(make_cli(), args, env=env)
    assert cosines(json.loads(plain.stdout)["vectors"], wanted).min() < 0.999


def test_catalog_reports_the_int8_loss_measured_with_the_catalogs_instruction(
    tmp_path: Path,
) -> None:
    """The loss is measured on pairs in the prompt: ``/info`` and ``synapse
    catalog`` read the one measured with the entry's instruction."""
    pytest.importorskip("onnxruntime")
    from synapse_core.config import ModelSpec

    folder = str(TINY2 / "qwen3-rerank")
    told = runtime.load(folder, quantize="int8", cache_dir=str(tmp_path), instruction=TOLD)
    options = {"model_dir": folder, "quantize": "int8", "cache_dir": str(tmp_path)}
    transport = synapse_cpu.plugin.CpuTransport()

    def conversion(**extra: Any) -> Any:
        spec = ModelSpec(
            name="r",
            task="rerank",
            transport="cpu",
            package="r",
            ceiling=512,
            options={**options, **extra},
        )
        return transport.model_conversion(spec)

    measured = conversion(instruction=TOLD)
    assert measured is not None and measured.max_score_delta == told.max_score_delta
    assert conversion().max_score_delta is None  # the card's prompt: not measured yet
