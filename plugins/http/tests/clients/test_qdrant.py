"""Sparse vectors as a vector database takes them: ``qdrant-client``'s
``SparseVector`` model (``indices`` and ``values``) reads ``/v1/encode``'s
sparse output as it is, and ``/embed_sparse``'s ``[{index, value}]`` (TEI's
shape) once paired up; both give the same vector for the same text."""

from __future__ import annotations

import httpx
from qdrant_client import models

from synapse_http.testing import API_KEY

from .conftest import SPARSE, TEXTS


def test_qdrant_reads_encode_and_embed_sparse_as_the_same_sparse_vectors(url: str) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60.0) as http:
        body = {"inputs": TEXTS, "outputs": ["sparse"]}
        encoded = http.post(f"/v1/encode?model={SPARSE}", json=body)
        tei = http.post(f"/embed_sparse?model={SPARSE}", json={"inputs": TEXTS})
    assert encoded.status_code == 200, encoded.text
    assert tei.status_code == 200, tei.text
    vectors = [models.SparseVector(**vector) for vector in encoded.json()["sparse"]]
    paired = [
        models.SparseVector(
            indices=[item["index"] for item in row], values=[item["value"] for item in row]
        )
        for row in tei.json()
    ]
    assert len(vectors) == len(TEXTS) == len(paired)
    for vector, other in zip(vectors, paired, strict=True):
        assert vector.indices and len(vector.indices) == len(vector.values)
        assert all(value > 0 for value in vector.values)  # SPLADE's weights
        assert dict(zip(vector.indices, vector.values, strict=True)) == dict(
            zip(other.indices, other.values, strict=True)
        )
