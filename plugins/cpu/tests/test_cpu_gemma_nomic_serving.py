"""NomicBERT and EmbeddingGemma folders served through a host and real CPU
worker processes: every text as its reference (the over-long one cut on
request), and a prompt by name as the prompted reference."""

from __future__ import annotations

import functools
import json
import shutil
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


async def test_a_folder_trained_to_be_cut_serves_cut_vectors_as_sentence_transformers_does(
    tmp_path: Path, onnx_cache: Path
) -> None:
    """``matryoshka_dimensions`` in config.json: ``dimensions=16`` gives the
    reference's first 16 values normalised again (sentence-transformers'
    ``truncate_dim`` with ``normalize_embeddings``); an unlisted size is refused."""
    pytest.importorskip("onnxruntime")
    ref = REFERENCE["nomic-mean"]
    root = tmp_path / "nomic"
    shutil.copytree(TINY2 / "nomic-mean", root)
    config_json = json.loads((root / "config.json").read_text())
    (root / "config.json").write_text(json.dumps({**config_json, "matryoshka_dimensions": [16]}))
    entry = model_entry(
        "nomic",
        task="embed",
        transport="cpu",
        ceiling=64,
        model_dir=str(root),
        cache_dir=str(onnx_cache),
    )
    deadline = synapse.Deadline.after(DEADLINE_S)
    async with synapse.open_host(config(entry), plugins=[synapse_cpu.plugin]) as h:
        assert h.catalog.entries["nomic"].traits.matryoshka_dims == (16,)
        texts = ref["texts"][:4]
        result = await h.embed("nomic", texts, deadline=deadline, dimensions=16)
        want = np.asarray(ref["vectors"][:4])[:, :16]
        assert cosines(result.vectors, want).min() >= 0.99999
        assert np.allclose(np.linalg.norm(result.vectors, axis=1), 1.0)
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("nomic", texts, deadline=deadline, dimensions=8)
        assert refused.value.code == "unsupported-dimensions"
        assert "gives 32-dimensional vectors and it may be cut to 16" in str(refused.value)
