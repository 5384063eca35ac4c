"""Classifiers: a ``BertForSequenceClassification`` folder of several labels.

No transformers output exists here (transformers is not installed), so the
reference is a float64 re-implementation of BERT written below from its
published equations (post-LayerNorm encoder, exact GELU, the pooler's tanh,
then the classifier), sharing no code with ``synapse_models``; it reads the
safetensors file and tokenizes with the ``tokenizers`` library's own pair
template. The folders are tiny seeded random models that
``data/classifier/make-classifier.py`` wrote: four exclusive labels, and
three independent ones (``multi_label_classification``).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from synapse_models import model as runtime
from synapse_models.errors import ModelFilesError
from synapse_models.files import locate
from synapse_models.folder import read_layout, task_of
from synapse_models.hosting import folder_problem, traits_of

DATA = Path(__file__).parent / "data" / "classifier"
SINGLE, MULTI = DATA / "bert-classify", DATA / "bert-multilabel"
RERANK = Path(__file__).parent / "data" / "tiny-models" / "bert-rerank"
TEXTS = ["A man is eating food.", "What is the capital of France?", "stocks fell"]
PAIRS = [
    ("A man is eating food.", "A man eats."),
    ("A man is eating food.", "Nobody is eating."),
    ("The stock market fell sharply today.", "Stocks rose."),
]


def _erf_gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    out: np.ndarray = 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    return out


def _norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + eps) * g + b
    return out


def reference_logits(folder: Path, first: str, second: str | None = None) -> np.ndarray:
    """One input's logits, float64, from the files alone (unbatched, no padding)."""
    config = json.loads((folder / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    encoding = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(first, second)
    ids, types = np.array(encoding.ids), np.array(encoding.type_ids)
    eps, heads = config["layer_norm_eps"], config["num_attention_heads"]
    e = "bert.embeddings."
    x = (
        w[e + "word_embeddings.weight"][ids]
        + w[e + "position_embeddings.weight"][: len(ids)]
        + w[e + "token_type_embeddings.weight"][types]
    )
    x = _norm(x, w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"], eps)

    def linear(name: str, v: np.ndarray) -> np.ndarray:
        out: np.ndarray = v @ w[name + ".weight"].T + w[name + ".bias"]
        return out

    size = x.shape[1] // heads
    for i in range(config["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        q, k, v = (
            linear(p + f"attention.self.{n}", x).reshape(len(ids), heads, size).transpose(1, 0, 2)
            for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = (weights @ v).transpose(1, 0, 2).reshape(len(ids), -1)
        a = p + "attention.output."
        x = _norm(
            x + linear(a + "dense", context),
            w[a + "LayerNorm.weight"],
            w[a + "LayerNorm.bias"],
            eps,
        )
        h = _erf_gelu(linear(p + "intermediate.dense", x))
        o = p + "output."
        x = _norm(
            x + linear(o + "dense", h), w[o + "LayerNorm.weight"], w[o + "LayerNorm.bias"], eps
        )
    pooled = np.tanh(linear("bert.pooler.dense", x[0]))
    return linear("classifier", pooled)


def reference_probabilities(logits: np.ndarray, multi_label: bool) -> np.ndarray:
    """transformers' text-classification pipeline's scores of the logits."""
    if multi_label:
        out: np.ndarray = 1.0 / (1.0 + np.exp(-logits))
        return out
    exps = np.exp(logits - logits.max())
    return exps / exps.sum()


def test_the_folders_are_classifiers_with_their_labels() -> None:
    single, multi = read_layout(SINGLE), read_layout(MULTI)
    assert single.labels == ("entailment", "neutral", "contradiction", "off-topic")
    assert (single.multi_label, multi.multi_label) == (False, True)
    assert multi.labels == ("toxic", "spam", "question")
    assert (task_of(SINGLE), task_of(MULTI), task_of(RERANK)) == ("classify",) * 2 + ("rerank",)
    assert read_layout(RERANK).labels == () and not read_layout(RERANK).classifier
    traits = traits_of(single, "classify")
    assert traits.labels == single.labels and traits.scorer is None


@pytest.mark.parametrize("runtime_name", ["numpy", "onnxruntime"])
@pytest.mark.parametrize("folder", [SINGLE, MULTI], ids=["single", "multi"])
def test_logits_equal_the_float64_reference(
    folder: Path, runtime_name: str, onnx_cache: Path
) -> None:
    loaded = runtime.load(str(folder), runtime=runtime_name, cache_dir=str(onnx_cache))
    encode = loaded.tokenizer.encode
    assert loaded.dims == len(read_layout(folder).labels)
    texts = loaded.classify(None, [encode(t) for t in TEXTS])
    expected = np.array([reference_logits(folder, t) for t in TEXTS])
    assert texts.shape == expected.shape
    np.testing.assert_allclose(texts, expected, atol=1e-5, rtol=0)
    # Pairs of one first text, as the host sends them (the first text as the query).
    first = PAIRS[0][0]
    seconds = [b for a, b in PAIRS if a == first]
    pairs = loaded.classify(encode(first), [encode(b) for b in seconds])
    expected = np.array([reference_logits(folder, first, b) for b in seconds])
    np.testing.assert_allclose(pairs, expected, atol=1e-5, rtol=0)
    # A pair is not its two texts run together as one: token types differ.
    assert not np.allclose(pairs[0], reference_logits(folder, first + " " + seconds[0]), atol=1e-3)


def test_a_classifier_does_not_rerank_and_a_cross_encoder_does_not_classify() -> None:
    loaded = runtime.load(str(SINGLE), runtime="numpy")
    with pytest.raises(ValueError, match="classifier"):
        loaded.rerank([5], [[6]])
    cross = runtime.load(str(RERANK), runtime="numpy")
    with pytest.raises(ValueError, match="not a classifier"):
        cross.classify(None, [[5]])


def test_a_classifier_given_another_task_is_unavailable_saying_classify() -> None:
    located, layout = locate(str(SINGLE), None), read_layout(SINGLE)
    for task in ("embed", "rerank"):
        problem = folder_problem(located, layout, task, None)  # type: ignore[arg-type]
        assert 'task = "classify"' in problem and "entailment" in problem
    assert folder_problem(located, layout, "classify", None) == ""
    cross = folder_problem(locate(str(RERANK), None), read_layout(RERANK), "classify", None)
    assert "not a classifier" in cross and 'task = "rerank"' in cross


def _copy_with(tmp_path: Path, **changes: object) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(SINGLE, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_regression_head_or_gappy_labels_are_refused_naming_config(tmp_path: Path) -> None:
    with pytest.raises(ModelFilesError, match="problem_type 'regression'"):
        read_layout(_copy_with(tmp_path, problem_type="regression"))
    shutil.rmtree(tmp_path / "copy")
    with pytest.raises(ModelFilesError, match="id2label must name the ids 0 to 3"):
        read_layout(_copy_with(tmp_path, id2label={"0": "a", "1": "b", "2": "c", "5": "d"}))


def test_labels_count_must_match_the_weights(tmp_path: Path) -> None:
    labels = {"0": "a", "1": "b", "2": "c"}
    folder = _copy_with(tmp_path, id2label=labels, num_labels=3)
    with pytest.raises(ModelFilesError, match=r"4 outputs; config\.json names 3 labels"):
        runtime.load(str(folder), runtime="numpy")


def test_reference_probabilities_are_distinct_and_unsaturated() -> None:
    """The data can tell softmax from sigmoid and one label from another."""
    for folder, multi in ((SINGLE, False), (MULTI, True)):
        probs = reference_probabilities(reference_logits(folder, TEXTS[0]), multi)
        assert len(set(np.round(probs, 3))) == len(probs)
        assert probs.max() < 0.99
        assert math.isclose(probs.sum(), 1.0) != multi
