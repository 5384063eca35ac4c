"""ModernBERT served by the CPU lane: an embedder (gte-modernbert-base's
layout) and a cross-encoder (gte-reranker-modernbert-base's) through a host
and real worker processes, and through ``synapse embed`` and ``synapse
rerank`` with a catalog naming the folders, each giving its reference."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.cli import make_cli
from synapse_core.testing import catalog_toml, host_config, model_entry
from synapse_models.testing import DATA

pytestmark = pytest.mark.subprocess

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def entry(name: str, runtime: str, cache: Path) -> dict[str, Any]:
    options: dict[str, Any] = {"runtime": runtime}
    if runtime == "onnxruntime":
        pytest.importorskip("onnxruntime")
        options["cache_dir"] = str(cache)
    kind = REFERENCE[name]["kind"]
    return model_entry(
        name, task=kind, transport="cpu", ceiling=512, model_dir=str(TINY2 / name), **options
    )


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("runtime", ["numpy", "onnxruntime"])
async def test_modernbert_embeds_and_reranks_as_its_reference(
    runtime: str, onnx_cache: Path
) -> None:
    embed_ref, rerank_ref = REFERENCE["modernbert-cls"], REFERENCE["modernbert-rerank"]
    # The serving tokenizer strips texts (as sentence-transformers did before
    # 6.3, which made these references): the one text with outer spaces is left out.
    kept = [i for i, t in enumerate(embed_ref["texts"]) if t == t.strip()]
    texts = [embed_ref["texts"][i] for i in kept]
    models = (
        entry("modernbert-cls", runtime, onnx_cache),
        entry("modernbert-rerank", runtime, onnx_cache),
    )
    async with synapse.open_host(config(*models), plugins=[synapse_cpu.plugin]) as h:
        embedder = h.catalog.entry("modernbert-cls", "embed")
        assert embedder.ceiling == 64 and embedder.buckets == (32, 64)
        deadline = synapse.Deadline.after(DEADLINE_S)
        # The longest text is over the ceiling: cut at its end, as sentence-transformers cuts it.
        result = await h.embed("modernbert-cls", texts, deadline=deadline, truncate=True)
        assert result.truncated == (texts.index(embed_ref["texts"][12]),)
        assert cosines(result.vectors, [embed_ref["vectors"][i] for i in kept]).min() >= 0.99999
        assert ":modernbert-cls-norm:" in result.identity and result.identity.endswith(runtime)
        assert h.catalog.entry("modernbert-rerank", "rerank").traits.scorer == "cross-encoder"
        for (q, d), score, raw in zip(
            rerank_ref["pairs"], rerank_ref["scores"], rerank_ref["raw_scores"], strict=True
        ):
            # The fourth pair is over the ceiling: its document is cut at the
            # end, which is what longest_first does to a short query's pair.
            ranked = await h.rerank("modernbert-rerank", q, [d], deadline=deadline, truncate=True)
            assert abs(ranked.scores[0] - score) <= 1e-5
            assert abs(ranked.raw_scores[0] - raw) <= 1e-5
        ranked = await h.rerank(
            "modernbert-rerank", rerank_ref["pairs"][0][0], [d for _, d in rerank_ref["pairs"][:2]]
        )
    assert np.allclose(ranked.scores, rerank_ref["scores"][:2], atol=1e-5)


def test_synapse_embed_and_rerank_serve_the_folders_a_catalog_names(
    tmp_path: Path, onnx_cache: Path
) -> None:
    embed_ref, rerank_ref = REFERENCE["modernbert-cls"], REFERENCE["modernbert-rerank"]
    catalog = tmp_path / "catalog.toml"
    models = [
        model_entry(
            name,
            task=REFERENCE[name]["kind"],
            transport="cpu",
            model_dir=str(TINY2 / name),
            cache_dir=str(onnx_cache),
        )
        for name in ("modernbert-cls", "modernbert-rerank")
    ]
    catalog.write_text(catalog_toml(*models), encoding="utf-8")
    env = {"SYNAPSE_PLUGINS": "cpu", "SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    runner = CliRunner()

    def run(*args: str) -> Any:
        result = runner.invoke(make_cli(), [*args, "--json", "--catalog", str(catalog)], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    texts = embed_ref["texts"][:4]
    embedded = run("embed", "modernbert-cls", *texts)
    assert ":modernbert-cls-norm:" in embedded["identity"] and embedded["dims"] == 32
    assert cosines(embedded["vectors"], embed_ref["vectors"][:4]).min() >= 0.99999
    query = rerank_ref["pairs"][0][0]
    docs = [d for q, d in rerank_ref["pairs"] if q == query]
    ranked = run("rerank", "modernbert-rerank", "-q", query, *docs)
    assert ":modernbert-cross-encoder:" in ranked["identity"]
    want = rerank_ref["scores"][: len(docs)]
    assert np.abs(np.array(ranked["scores"]) - want).max() <= 1e-5
