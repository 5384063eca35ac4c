"""``huggingface_hub.InferenceClient(base_url=...)``: ``feature_extraction``
posts to ``/``, as against a TEI server; with the base URL on ``/predict``
and ``/embed_all``, ``text_classification`` and ``feature_extraction`` read
those routes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from huggingface_hub import InferenceClient

from synapse_http.testing import API_KEY

from .conftest import QUERY


def test_inference_client_feature_extraction_matches_host_embed(
    url: str, same_vectors: Callable[[Any, list[str]], None]
) -> None:
    client = InferenceClient(base_url=url, api_key=API_KEY)
    vector = client.feature_extraction(QUERY)
    same_vectors(vector.reshape(1, -1), [QUERY])


def test_inference_client_text_classification_reads_predict(url: str) -> None:
    """``text_classification`` against ``/predict`` (TEI's route). For one
    text TEI answers a flat list of labels, best first, and the client (which
    expects a list per input, as the hub's serverless API answers) keeps its
    first element: the best label, with the probability ``/predict`` gives."""
    import httpx

    client = InferenceClient(base_url=url + "/predict", api_key=API_KEY)
    best = client.text_classification(QUERY)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    answer = httpx.post(url + "/predict", json={"inputs": QUERY}, headers=headers).json()
    scores = [item["score"] for item in answer]
    assert scores == sorted(scores, reverse=True)  # best first
    assert len(answer) == 4 and abs(sum(item["score"] for item in answer) - 1.0) < 1e-5
    assert best.label == answer[0]["label"]  # type: ignore[attr-defined]
    assert abs(best.score - answer[0]["score"]) < 1e-9  # type: ignore[attr-defined]
    assert best.label in {"entailment", "neutral", "contradiction", "off-topic"}  # type: ignore[attr-defined]


def test_inference_client_feature_extraction_reads_every_token_from_embed_all(
    url: str,
) -> None:
    """``feature_extraction`` against ``/embed_all`` (TEI's route): one vector
    per token of the text, special tokens included, MiniLM's width."""
    client = InferenceClient(base_url=url + "/embed_all", api_key=API_KEY)
    vectors = client.feature_extraction(QUERY)
    assert vectors.ndim == 3 and vectors.shape[0] == 1 and vectors.shape[2] == 384
    assert 3 <= vectors.shape[1] <= 32  # the text's tokens and [CLS], [SEP]
