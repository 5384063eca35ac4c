"""What is specific to the Qwen3 family: a decoder's framing (no start
token, ``<|endoftext|>`` appended), the LLM reranker's prompt (its pieces,
its length toward the ceiling, its instruction, a tied or untied head),
int8, and the configs it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from synapse_models import model as runtime
from synapse_models.errors import ModelFilesError
from synapse_models.families.qwen3 import RERANK_PROMPT
from synapse_models.testing import DATA
from synapse_models.tokenizer import tokenizer_of

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
#: the worst int8 losses measured on the tiny random models (recipe r2,
#: onnxruntime 1.32): embedder cosine 0.9925 to the reference, reranker
#: |score| 0.137 (|logit| 0.59; its own measure on the fixed texts: |logit| 0.227);
#: random weights at hidden 32-48 quantize
#: worse than trained ones, so these bound a regression, not a promise
INT8_MIN_COSINE = 0.99
INT8_MAX_SCORE_DELTA = 0.2


def sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def cosines(got: Any, want: Any) -> Any:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def scores(model: runtime.Model) -> Any:
    encode = model.tokenizer.encode
    pairs = REFERENCE["qwen3-rerank"]["pairs"]
    return np.array([float(model.rerank(encode(q), [encode(d)])[0]) for q, d in pairs])


def test_the_embedder_is_framed_with_the_end_token_only() -> None:
    model = runtime.load(str(TINY2 / "qwen3-last"), runtime="numpy")
    eot = model.tokenizer.token_id("<|endoftext|>")
    assert model.framing.before == () and model.framing.after == (eot,)
    assert model.layout.causal and not model.layout.cross_encoder
    assert model.layout.kind == "qwen3-lasttoken-norm"
    # Texts are encoded as given (spaces kept), as the reference's tokenizer does.
    assert model.tokenizer.positions(len(model.tokenizer.encode("  a  "))) == 1 + len(
        model.tokenizer.encode("  a  ")
    )
    assert model.tokenizer.encode("  a  ") != model.tokenizer.encode("a")


def test_an_encoder_tokenizer_without_a_start_token_is_still_refused() -> None:
    # The reranker's tokenizer frames nothing: fine for a decoder, not for an encoder.
    path = TINY2 / "qwen3-rerank" / "tokenizer.json"
    with pytest.raises(ModelFilesError, match="a start token"):
        tokenizer_of(path).framing()
    assert tokenizer_of(path, decoder=True).framing().single == 0


def test_the_reranker_frames_a_pair_in_the_model_cards_prompt() -> None:
    model = runtime.load(str(TINY2 / "qwen3-rerank"), runtime="numpy")
    layout, tokenizer = model.layout, model.tokenizer
    assert layout.cross_encoder and layout.template is not None
    assert layout.kind == "qwen3-llm-reranker" and layout.max_tokens == 256
    template = REFERENCE["qwen3-rerank"]["template"]
    assert layout.template.instruction == template["instruction"]
    query, doc = REFERENCE["qwen3-rerank"]["pairs"][0]
    # The ids packed are the ids of the whole prompt, tokenised as one text.
    body = template["body"].format(instruction=template["instruction"], query=query, document=doc)
    inner: Any = tokenizer.load()
    whole = [
        *inner.encode(template["prefix"], add_special_tokens=False).ids,
        *inner.encode(body, add_special_tokens=False).ids,
        *inner.encode(template["suffix"], add_special_tokens=False).ids,
    ]
    q, d = tokenizer.encode(query), tokenizer.encode(doc)
    framing = model.framing
    assert [*framing.before, *q, *framing.between, *d, *framing.pair_after] == whole
    # The whole prompt counts toward the ceiling.
    assert tokenizer.sequence_length(d, q) == len(whole)
    assert len(whole) == REFERENCE["qwen3-rerank"]["pair_tokens"][0]
    # A blank text stays blank (the host refuses it), and spans skip the lead.
    assert tokenizer.encode("   ") == []
    pieces = tokenizer.pieces("Paris")
    assert "".join(p.text for p in pieces) == "Paris" and pieces[0].start == 0


def test_the_instruction_can_be_replaced() -> None:
    path = TINY2 / "qwen3-rerank" / "tokenizer.json"
    other = RERANK_PROMPT.with_instruction("Find the answer")
    default = tokenizer_of(path, True, RERANK_PROMPT, True).framing()
    replaced = tokenizer_of(path, True, other, True).framing()
    assert replaced.before != default.before and replaced.between == default.between
    assert "<Instruct>: Find the answer\n<Query>:" in other.prefix_text


def test_an_untied_reranker_reads_its_lm_head(tmp_path: Path) -> None:
    folder = tmp_path / "untied"
    shutil.copytree(TINY2 / "qwen3-rerank", folder)
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    tensors["model.embed_tokens.weight"] = tensors["model.embed_tokens.weight"].copy()
    save_file(tensors, str(folder / "model.safetensors"))
    got = scores(runtime.load(str(folder), runtime="numpy"))
    assert np.abs(got - REFERENCE["qwen3-rerank"]["raw_scores"]).max() <= 1e-5
    # Without lm_head, an untied checkpoint is refused naming the tensor.
    del tensors["lm_head.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ModelFilesError, match=r"lm_head\.weight"):
        runtime.load(str(folder), runtime="numpy")


def test_int8_serves_both_and_reports_its_loss(onnx_cache: Path) -> None:
    pytest.importorskip("onnxruntime")
    embedder = runtime.load(str(TINY2 / "qwen3-last"), quantize="int8", cache_dir=str(onnx_cache))
    assert embedder.identity.endswith(":onnxruntime-int8")
    assert embedder.min_cosine is not None and embedder.min_cosine >= INT8_MIN_COSINE
    ref = REFERENCE["qwen3-last"]
    most = embedder.layout.max_tokens - embedder.framing.single
    vectors = embedder.embed([embedder.tokenizer.encode(t)[:most] for t in ref["texts"]])
    assert cosines(vectors, ref["vectors"]).min() >= INT8_MIN_COSINE
    reranker = runtime.load(str(TINY2 / "qwen3-rerank"), quantize="int8", cache_dir=str(onnx_cache))
    delta = np.abs(sigmoid(scores(reranker)) - REFERENCE["qwen3-rerank"]["scores"]).max()
    assert delta <= INT8_MAX_SCORE_DELTA
    # The measured loss of a one-label head is its worst logit difference.
    assert reranker.min_cosine is None and reranker.max_score_delta is not None


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported; supported: silu"),
        ({"use_sliding_window": True}, "use_sliding_window true is not supported"),
        (
            {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
            "rope scaling 'yarn' is not supported",
        ),
        ({"num_key_value_heads": 3}, "multiple of num_key_value_heads"),
    ],
)
def test_a_config_it_cannot_serve_is_refused_naming_the_file(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    folder = tmp_path / "qwen3"
    shutil.copytree(TINY2 / "qwen3-last", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | change))
    with pytest.raises(ModelFilesError) as refused:
        runtime.load(str(folder), runtime="numpy")
    assert str(folder / "config.json") in str(refused.value)
    assert words in str(refused.value)


def test_a_reranker_folder_is_a_rerank_task_and_its_instruction_can_be_given() -> None:
    from synapse_models.folder import task_of

    assert task_of(TINY2 / "qwen3-rerank") == "rerank"  # no *ForSequenceClassification
    assert task_of(TINY2 / "qwen3-last") == "embed"
    told = runtime.load(str(TINY2 / "qwen3-rerank"), runtime="numpy", instruction="Find it")
    default = runtime.load(str(TINY2 / "qwen3-rerank"), runtime="numpy")
    assert told.layout.template is not None and told.layout.template.instruction == "Find it"
    assert told.framing.before != default.framing.before
    assert told.identity != default.identity and told.layout.kind.startswith("qwen3-llm-reranker-i")
    with pytest.raises(ValueError, match="LLM reranker"):
        runtime.load(str(TINY2 / "qwen3-last"), runtime="numpy", instruction="Find it")


def test_an_instruction_of_its_own_has_its_own_int8_loss() -> None:
    """The loss is measured on pairs in the prompt, which the instruction is
    part of: a reranker served with another one must not read the card's."""
    from synapse_models import files

    located = files.ModelFiles(TINY2 / "qwen3-rerank", "qwen3-rerank", None)
    layout = files.check_present(located)
    told = layout.with_instruction("Find the answer")
    keys = {files.int8_key(located, each, "sha") for each in (layout, told)}
    assert len(keys) == 2
    assert files.int8_key(located, told, "sha").endswith(told.instruction_mark)
