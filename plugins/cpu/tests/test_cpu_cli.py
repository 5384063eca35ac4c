"""``synapse embed minilm --json`` from the shipped catalog, compared with the reference."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from synapse_core.cli import make_cli

pytestmark = pytest.mark.subprocess


def run(*args: str) -> Any:
    # XDG_CACHE_HOME: conftest's test folder, so built graphs stay out of the user's cache.
    env = {"SYNAPSE_PLUGINS": "cpu", "SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    return CliRunner().invoke(make_cli(), list(args), env=env)


def test_embed_json_with_the_shipped_minilm_matches_the_reference(
    reference: dict[str, Any], reference_vectors: np.ndarray[Any, Any], matches_reference: Any
) -> None:
    texts = [item["text"] for item in reference["items"]]
    result = run("embed", "minilm", *texts, "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    # The shipped entry has no options: onnxruntime, on every core.
    assert (
        doc["identity"] == "cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:onnxruntime"
        and doc["dims"] == 384
    )
    matches_reference(np.array(doc["vectors"], dtype=np.float32), reference_vectors)


def test_similarity_and_rerank_show_meaning() -> None:
    similar = run(
        "similarity",
        "minilm",
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply today.",
        "--json",
    )
    assert similar.exit_code == 0, similar.stderr
    near, far = (s["cosine"] for s in json.loads(similar.stdout)["similarities"])
    assert near > 0.6 > 0.2 > far
    ranked = run(
        "rerank",
        "minilm-rerank",
        "-q",
        "What is the capital of France?",
        "I love pizza",
        "Paris is the capital and most populous city of France.",
    )
    assert ranked.exit_code == 0, ranked.stderr
    assert ranked.stdout.splitlines()[2].split()[:2] == ["1", "1"]  # Paris ranks first


def test_catalog_says_minilm_rerank_is_not_a_cross_encoder() -> None:
    result = run("catalog")
    assert result.exit_code == 0, result.stderr
    assert "minilm-rerank: bi-encoder rerank" in result.stdout
    assert "not a cross-encoder" in result.stdout
    # The transport says so too, from the folder (a BertModel, not a classifier),
    # but the description says it already: one line of it, not two (the
    # other note is the worker's memory).
    notes = [line for line in result.stdout.splitlines() if line.startswith("  minilm-rerank:")]
    assert sum("cross-encoder" in line for line in notes) == 1, notes
    assert [line for line in notes if "cross-encoder" not in line] == [
        "  minilm-rerank: memory per worker: about 167 MiB"
    ], notes
    doc = json.loads(run("catalog", "--json").stdout)
    scorers = {m["name"]: m["scorer"] for m in doc["models"]}
    assert scorers["minilm-rerank"] == "bi-encoder" and scorers["minilm"] is None


def test_embed_sparse_and_all_print_the_folders_outputs() -> None:
    from synapse_models.testing import DATA

    tiny = DATA / "tiny-models-2"
    ref = json.loads((tiny / "reference.json").read_text(encoding="utf-8"))["models"]
    texts = ref["m3-multi"]["texts"][:3]
    folder = str(tiny / "m3-multi")
    sparse = run("embed", "--model", folder, "--sparse", "--json", *texts)
    assert sparse.exit_code == 0, sparse.stderr
    expected = ref["m3-multi"]["sparse_weights"][:3]
    for got, want in zip(json.loads(sparse.stdout)["sparse"], expected, strict=True):
        assert got["indices"] == want["indices"]
        assert np.allclose(got["values"], want["values"], rtol=0, atol=1e-5)
    shown = run("embed", "--model", folder, "--all", *texts)
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("m3-multi: 3 token-vector lists")
    counts = [len(v) for v in ref["m3-multi"]["colbert_vectors"][:3]]
    assert [line.split()[1] for line in lines[2:5]] == [str(n) for n in counts]
    refused = run("embed", "--model", str(tiny / "nomic-mean"), "--sparse", "x")
    assert refused.exit_code != 0 and "it computes: dense, multi" in refused.stderr
