"""NomicBERT (``nomic-mean``, nomic-embed-text-v1.5's layout) beyond its
reference: int8, the config keys read, and what is refused."""

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

FOLDER = DATA / "tiny-models-2" / "nomic-mean"
REFERENCE: dict[str, Any] = json.loads(
    (DATA / "tiny-models-2" / "reference.json").read_text(encoding="utf-8")
)["models"]["nomic-mean"]
#: the int8 graph's worst cosine to float32 measured on this folder was 0.9988
INT8_FLOOR = 0.995


def changed(tmp_path: Path, **fields: Any) -> Path:
    """A copy of the folder whose config.json has ``fields`` (``None``: left out)."""
    root = tmp_path / "nomic"
    shutil.copytree(FOLDER, root)
    config = json.loads((root / "config.json").read_text())
    config.update(fields)
    config = {k: v for k, v in config.items() if fields.get(k, 0) is not None}
    (root / "config.json").write_text(json.dumps(config))
    return root


def cosines(got: Any, want: Any) -> Any:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def cut(model: runtime.Model, text: str) -> list[int]:
    return model.tokenizer.encode(text)[: model.layout.max_tokens - model.framing.single]


def test_int8_serves_nomic_and_reports_its_loss(onnx_cache: Path) -> None:
    pytest.importorskip("onnxruntime")
    model = runtime.load(
        str(FOLDER), runtime="onnxruntime", quantize="int8", cache_dir=str(onnx_cache)
    )
    assert model.identity.endswith(":onnxruntime-int8")
    assert model.min_cosine is not None and INT8_FLOOR <= model.min_cosine < 1.0
    vectors = model.embed([cut(model, t) for t in REFERENCE["texts"]])
    assert cosines(vectors, REFERENCE["vectors"]).min() >= INT8_FLOOR


def test_the_layout_reads_the_remote_code_config() -> None:
    model = runtime.load(str(FOLDER), runtime="numpy")
    layout = model.layout
    assert layout.architecture == "nomic-bert" and layout.kind == "nomic-bert-mean-norm"
    assert (layout.hidden, layout.positions, layout.max_tokens) == (32, 128, 64)
    assert layout.prompts == {"query": "search_query: ", "document": "search_document: "}


def test_gpt2_style_keys_alone_are_enough(tmp_path: Path) -> None:
    """The hub config before transformers 5 had only ``n_embd`` & co and ``n_positions``."""
    native = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    root = changed(
        tmp_path,
        **dict.fromkeys((*native, "layer_norm_eps", "max_position_embeddings", "hidden_act")),
    )
    model = runtime.load(str(root), runtime="numpy")
    assert model.layout.positions == 512  # n_positions
    vectors = model.embed([cut(model, t) for t in REFERENCE["texts"]])
    assert cosines(vectors, REFERENCE["vectors"]).min() >= 0.99999


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"prenorm": True}, "prenorm True is not supported; supported: False"),
        ({"rotary_emb_interleaved": True}, "rotary_emb_interleaved True is not supported"),
        ({"rotary_emb_fraction": 0.5}, "rotary_emb_fraction 0.5 is not supported"),
        ({"rotary_scaling_factor": 2.0}, "rotary_scaling_factor 2.0 is not supported"),
        ({"activation_function": "gelu"}, "activation_function 'gelu' is not supported"),
        ({"moe_every_n_layers": 2, "num_experts": 8}, "mixture-of-experts layers"),
    ],
)
def test_what_nomic_does_not_serve_is_refused_naming_config_json(
    tmp_path: Path, fields: dict[str, Any], problem: str
) -> None:
    root = changed(tmp_path, **fields)
    with pytest.raises(files.ModelFilesError) as raised:
        files.check_present(files.ModelFiles(root, "nomic", None))
    assert raised.value.path == str(root / "config.json")
    assert problem in str(raised.value) and "supported" in str(raised.value)


def test_biases_the_config_asks_for_are_read_by_their_hub_names(tmp_path: Path) -> None:
    root = changed(tmp_path, qkv_proj_bias=True)
    with pytest.raises(files.ModelFilesError, match=r"encoder\.layers\.0\.attn\.Wqkv\.bias"):
        runtime.load(str(root), runtime="numpy")


def test_matryoshka_dimensions_in_config_json_reach_the_catalog_traits(tmp_path: Path) -> None:
    """vLLM's key; nomic-embed-text-v1.5 was trained to be cut to 768 down to 64."""
    from synapse_models.hosting import traits_of

    root = changed(tmp_path, matryoshka_dimensions=[16, 8, 16])
    layout = files.check_present(files.ModelFiles(root, "nomic", None))
    assert layout.matryoshka == (8, 16)
    assert traits_of(layout, "embed").matryoshka_dims == (8, 16)
    assert files.check_present(files.ModelFiles(FOLDER, "nomic", None)).matryoshka == ()


@pytest.mark.parametrize("given", [16, [16, 0], [8.5], "16"])
def test_bad_matryoshka_dimensions_are_refused_naming_config_json(
    tmp_path: Path, given: Any
) -> None:
    root = changed(tmp_path, matryoshka_dimensions=given)
    with pytest.raises(files.ModelFilesError, match="matryoshka_dimensions must be a list") as e:
        files.check_present(files.ModelFiles(root, "nomic", None))
    assert e.value.path == str(root / "config.json")
