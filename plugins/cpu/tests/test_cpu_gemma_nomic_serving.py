"""NomicBERT and EmbeddingGemma folders served through a host and real CPU
worker processes: every text as its reference (the over-long one cut on
request), and a prompt by name as the prompted reference."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.testing import host_config, model_entry
from synapse_models.testing import DATA

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.subprocess,
    pytest.mark.parametrize("anyio_backend", ["asyncio"]),
]

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("name", ["nomic-mean", "gemma3-dense"])
async def test_a_folder_is_served_as_its_reference_with_its_prompts(
    name: str, onnx_cache: Path
) -> None:
    pytest.importorskip("onnxruntime")
    ref = REFERENCE[name]
    entry = model_entry(
        name,
        task="embed",
        transport="cpu",
        ceiling=512,  # more than the folder's: its max_seq_length caps it
        model_dir=str(TINY2 / name),
        cache_dir=str(onnx_cache),
    )
    deadline = synapse.Deadline.after(DEADLINE_S)
    async with synapse.open_host(config(entry), plugins=[synapse_cpu.plugin]) as h:
        assert h.catalog.entry(name, "embed").ceiling == ref["max_tokens"]
        # The reference holds some of the folder's prompts (Gemma's four of 14).
        assert ref["prompts"].items() <= h.catalog.entries[name].spec.prompts.items()
        result = await h.embed(name, ref["texts"], deadline=deadline, truncate=True)
        assert cosines(result.vectors, ref["vectors"]).min() >= 0.99999
        assert result.truncated == tuple(
            i for i, n in enumerate(ref["tokens"]) if n > ref["max_tokens"]
        )
        prompted = await h.embed(name, ref["texts"][:4], deadline=deadline, prompt_name="query")
        assert cosines(prompted.vectors, ref["prompted"]["query"]).min() >= 0.99999
