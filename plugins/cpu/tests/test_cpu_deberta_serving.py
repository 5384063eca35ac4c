"""A DeBERTa-v2 cross-encoder (the tiny mxbai-rerank folder) served through
a host and a real ``cpu`` worker: its scores and logits are the reference's,
and the pair over the ceiling is refused with its index, or its document cut
on request to what CrossEncoder scored."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.testing import host_config, model_entry
from synapse_models.testing import DATA

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]

NAME = "deberta-rerank"
FOLDER = DATA / "tiny-models-2" / NAME
REFERENCE: dict[str, Any] = json.loads(
    (DATA / "tiny-models-2" / "reference.json").read_text(encoding="utf-8")
)["models"][NAME]
#: the reference pair whose document passes the folder's 64 tokens with the query
OVER = 3
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def deadline() -> synapse.Deadline:
    return synapse.Deadline.after(DEADLINE_S)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("runtime", ["numpy", "onnxruntime"])
async def test_a_deberta_cross_encoder_reranks_as_its_reference(
    runtime: str, onnx_cache: Path
) -> None:
    options: dict[str, Any] = {"runtime": runtime}
    if runtime == "onnxruntime":
        pytest.importorskip("onnxruntime")
        options["cache_dir"] = str(onnx_cache)
    entry = model_entry(
        NAME, task="rerank", transport="cpu", ceiling=512, model_dir=str(FOLDER), **options
    )
    pairs = REFERENCE["pairs"]
    async with synapse.open_host(config(entry), plugins=[synapse_cpu.plugin]) as h:
        catalog = h.catalog.entry(NAME, "rerank")
        assert catalog.ceiling == REFERENCE["max_tokens"]
        assert catalog.traits.scorer == "cross-encoder"
        query = pairs[OVER][0]
        with pytest.raises(synapse.Refused) as refused:
            await h.rerank(NAME, query, [pairs[2][1], pairs[OVER][1]], deadline=deadline())
        assert refused.value.code == "over-ceiling" and refused.value.index == 1
        results = [
            await h.rerank(NAME, q, [d], deadline=deadline(), truncate=True) for q, d in pairs
        ]
    for index, result in enumerate(results):
        assert result.truncated == ((0,) if index == OVER else ())
        assert abs(result.scores[0] - REFERENCE["scores"][index]) <= 1e-5, index
        assert abs(result.raw_scores[0] - REFERENCE["raw_scores"][index]) <= 1e-5, index
