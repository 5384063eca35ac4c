"""Every family against its tiny reference (``data/tiny-models-2``: random
models in the hub's own layouts, with what sentence-transformers and
transformers computed for them), on each runtime.

A folder whose family is not served yet is listed in :data:`NOT_YET`: its
tests are expected to fail (strictly: one that passes fails the run, so the
list is kept honest). Sparse and multi-vector references (``splade``,
``m3-multi``) are for the outputs beyond a dense vector, not checked here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synapse_models import model as runtime
from synapse_models.testing import DATA

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
EMBEDDERS = [name for name, m in REFERENCE.items() if m["kind"] == "embed"]
RERANKERS = [name for name, m in REFERENCE.items() if m["kind"] == "rerank"]
#: folders whose family is not served yet
NOT_YET = {}
MIN_COSINE = 0.99999
MAX_SCORE_DELTA = 1e-5

_models: dict[tuple[str, str], runtime.Model] = {}


def served(names: list[str]) -> list[Any]:
    """``names`` as parameters, those in :data:`NOT_YET` expected to fail."""
    mark = pytest.mark.xfail(reason="family not served yet", strict=True)
    return [pytest.param(n, marks=mark) if n in NOT_YET else n for n in names]


@pytest.fixture(params=runtime.RUNTIMES)
def runtime_name(request: pytest.FixtureRequest) -> str:
    if request.param == "onnxruntime":
        pytest.importorskip("onnxruntime")
    return str(request.param)


def loaded(name: str, runtime_name: str, cache: Path) -> runtime.Model:
    """Each tiny model once per process and runtime (loading builds its graph)."""
    key = (name, runtime_name)
    if key not in _models:
        _models[key] = runtime.load(str(TINY2 / name), runtime=runtime_name, cache_dir=str(cache))  # type: ignore[arg-type]
    return _models[key]


def cosines(got: Any, want: Any) -> Any:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def check_vectors(got: Any, want: Any) -> None:
    assert np.shape(got) == np.shape(want)
    assert cosines(got, want).min() >= MIN_COSINE, cosines(got, want)


def ids(model: runtime.Model, text: str) -> list[int]:
    """The text's ids as the serving tokenizer gives them: stripped first,
    as sentence-transformers did before it tokenised texts as given (these
    references are of a release that does), unless the family keeps a
    text's surrounding spaces (``strips_texts = False``: a tokenizer that
    makes tokens of them)."""
    return model.tokenizer.encode(text)


def cut(model: runtime.Model, text: str) -> list[int]:
    """The text's ids cut to the ceiling, as sentence-transformers cuts them."""
    return ids(model, text)[: model.layout.max_tokens - model.framing.single]


def cut_pair(model: runtime.Model, query: list[int], document: list[int]) -> tuple[Any, Any]:
    """A pair over the ceiling cut as CrossEncoder cut it (``longest_first``):
    with a query of at most half the room, only the document loses its tail,
    which is also what Synapse's ``truncate`` does (it never cuts the query)."""
    room = model.layout.max_tokens - model.framing.pair
    if len(query) + len(document) <= room:
        return query, document
    assert len(query) <= room // 2, "longest_first would cut the query too"
    return query, document[: room - len(query)]


@pytest.mark.parametrize("name", served(EMBEDDERS))
def test_each_embedder_matches_its_reference(
    name: str, runtime_name: str, onnx_cache: Path
) -> None:
    ref = REFERENCE[name]
    model = loaded(name, runtime_name, onnx_cache)
    assert model.layout.max_tokens == ref["max_tokens"]
    assert model.dims == ref["dims"]
    check_vectors(model.embed([cut(model, t) for t in ref["texts"]]), ref["vectors"])
    # One text alone gives the vector it gets in a padded batch.
    alone = model.embed([cut(model, ref["texts"][1])])
    check_vectors(alone, [ref["vectors"][1]])


@pytest.mark.parametrize("name", served([n for n in EMBEDDERS if "prompted" in REFERENCE[n]]))
def test_prompted_texts_match_the_prompted_reference(
    name: str, runtime_name: str, onnx_cache: Path
) -> None:
    ref = REFERENCE[name]
    model = loaded(name, runtime_name, onnx_cache)
    for prompt_name, vectors in ref["prompted"].items():
        prompt = model.layout.prompts[prompt_name]
        texts = ref["texts"][: len(vectors)]
        check_vectors(model.embed([cut(model, prompt + t) for t in texts]), vectors)


@pytest.mark.parametrize("name", served(RERANKERS))
def test_each_reranker_matches_its_reference(
    name: str, runtime_name: str, onnx_cache: Path
) -> None:
    ref = REFERENCE[name]
    model = loaded(name, runtime_name, onnx_cache)
    encode = model.tokenizer.encode
    pairs = [cut_pair(model, encode(q), encode(d)) for q, d in ref["pairs"]]
    logits = np.array([float(model.rerank(q, [d])[0]) for q, d in pairs])
    assert np.abs(logits - ref["raw_scores"]).max() <= MAX_SCORE_DELTA, logits
    probabilities = [1.0 / (1.0 + math.exp(-x)) for x in logits]
    assert np.abs(np.array(probabilities) - ref["scores"]).max() <= MAX_SCORE_DELTA
