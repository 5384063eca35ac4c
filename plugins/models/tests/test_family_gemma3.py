"""Gemma 3 as an encoder (``gemma3-dense``, google/embeddinggemma-300m's
layout) beyond its reference: int8, the folder's layout and prompts, the
config keys read, the spaces its tokenizer keeps, and what is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synapse_models import files
from synapse_models import model as runtime
from synapse_models.testing import DATA

FOLDER = DATA / "tiny-models-2" / "gemma3-dense"
REFERENCE: dict[str, Any] = json.loads(
    (DATA / "tiny-models-2" / "reference.json").read_text(encoding="utf-8")
)["models"]["gemma3-dense"]
#: the int8 graph's worst cosine to float32 measured on this folder was 0.9982
INT8_FLOOR = 0.995


def changed(tmp_path: Path, **fields: Any) -> Path:
    """A copy of the folder whose config.json has ``fields`` (``None``: left out)."""
    root = tmp_path / "gemma"
    shutil.copytree(FOLDER, root)
    config = json.loads((root / "config.json").read_text())
    config.update(fields)
    config = {k: v for k, v in config.items() if k not in fields or fields[k] is not None}
    (root / "config.json").write_text(json.dumps(config))
    return root


def cosines(got: Any, want: Any) -> Any:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def cut(model: runtime.Model, text: str) -> list[int]:
    return model.tokenizer.encode(text)[: model.layout.max_tokens - model.framing.single]


def test_int8_serves_gemma_and_reports_its_loss(onnx_cache: Path) -> None:
    pytest.importorskip("onnxruntime")
    model = runtime.load(
        str(FOLDER), runtime="onnxruntime", quantize="int8", cache_dir=str(onnx_cache)
    )
    assert model.identity.endswith(":onnxruntime-int8")
    assert model.min_cosine is not None and INT8_FLOOR <= model.min_cosine < 1.0
    vectors = model.embed([cut(model, t) for t in REFERENCE["texts"]])
    assert cosines(vectors, REFERENCE["vectors"]).min() >= INT8_FLOOR


def test_the_layout_has_two_dense_modules_and_fourteen_prompts() -> None:
    model = runtime.load(str(FOLDER), runtime="numpy")
    layout = model.layout
    assert layout.kind == "gemma3-mean-dense2-norm"
    assert [(d.in_features, d.out_features, d.bias) for d in layout.dense] == [
        (48, 192, False),
        (192, 48, False),
    ]
    assert model.dims == 48 and layout.max_tokens == 64 and layout.positions == 128
    assert len(layout.prompts) == 14
    assert REFERENCE["prompts"].items() <= layout.prompts.items()
    assert model.framing.before == (2,) and model.framing.after == (1,)  # <bos> ... <eos>


def test_surrounding_spaces_are_tokens_of_gemmas_tokenizer() -> None:
    """sentence-transformers gives Gemma's tokenizer the text as written."""
    model = runtime.load(str(FOLDER), runtime="numpy")
    text = "   leading and trailing spaces   "
    assert len(model.tokenizer.encode(text)) > len(model.tokenizer.encode(text.strip()))
    index = REFERENCE["texts"].index(text)
    assert cosines(model.embed([cut(model, text)]), [REFERENCE["vectors"][index]]).min() >= 0.99999


def test_layer_types_follow_the_sliding_window_pattern_when_not_listed(tmp_path: Path) -> None:
    root = changed(
        tmp_path, layer_types=None, _sliding_window_pattern=None, sliding_window_pattern=3
    )
    model = runtime.load(str(root), runtime="numpy")
    vectors = model.embed([cut(model, t) for t in REFERENCE["texts"]])
    assert cosines(vectors, REFERENCE["vectors"]).min() >= 0.99999


def test_transformers_5_rope_parameters_are_read_by_layer_type(tmp_path: Path) -> None:
    parameters = {
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    }
    root = changed(tmp_path, rope_parameters=parameters, rope_theta=None, rope_local_base_freq=None)
    model = runtime.load(str(root), runtime="numpy")
    vectors = model.embed([cut(model, t) for t in REFERENCE["texts"]])
    assert cosines(vectors, REFERENCE["vectors"]).min() >= 0.99999


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"use_bidirectional_attention": False},
            "use_bidirectional_attention False is not supported; supported: True",
        ),
        ({"hidden_activation": "gelu"}, "hidden_activation 'gelu' is not supported"),
        ({"attn_logit_softcapping": 50.0}, "attn_logit_softcapping 50.0 is not supported"),
        ({"attention_bias": True}, "attention_bias True is not supported"),
        (
            {"rope_scaling": {"rope_type": "linear", "factor": 8.0}},
            "rope_scaling {'rope_type': 'linear', 'factor': 8.0} is not supported",
        ),
        ({"layer_types": ["chunked_attention"] * 3}, "layer_types ['chunked_attention'"),
    ],
)
def test_what_gemma_does_not_serve_is_refused_naming_config_json(
    tmp_path: Path, fields: dict[str, Any], problem: str
) -> None:
    root = changed(tmp_path, **fields)
    with pytest.raises(files.ModelFilesError) as raised:
        files.check_present(files.ModelFiles(root, "gemma", None))
    assert raised.value.path == str(root / "config.json")
    assert problem in str(raised.value) and "supported" in str(raised.value)
