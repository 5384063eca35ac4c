"""The DeBERTa-v2 family beyond its tiny reference (``test_families.py``):
the configurations mxbai-rerank does not use (own position projections, one
position term, unbucketed and clamped relative positions, absolute positions,
token types) against a literal float64 transcription of transformers'
``DisentangledSelfAttention``, padding, int8, and the refusals.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from synapse_models import model as runtime
from synapse_models.errors import ModelFilesError
from synapse_models.families.deberta import log_bucket
from synapse_models.testing import DATA

FOLDER = DATA / "tiny-models-2" / "deberta-rerank"
REFERENCE: dict[str, Any] = json.loads(
    (DATA / "tiny-models-2" / "reference.json").read_text(encoding="utf-8")
)["models"]["deberta-rerank"]
#: int8's worst |logit difference| from float32 allowed on the reference
#: pairs (measured: 0.139 on this random tiny model, logits up to 2.2)
INT8_MAX_DELTA = 0.25
Array = np.ndarray[Any, Any]


def _ln(x: Array, t: dict[str, Array], name: str, eps: float) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * t[name + ".weight"] + t[name + ".bias"]


def _linear(x: Array, t: dict[str, Array], name: str) -> Array:
    return x @ t[name + ".weight"].T + t[name + ".bias"]


def _gelu(x: Array) -> Array:
    return x * 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _buckets(relative: Array, buckets: int, most: int) -> Array:
    """``make_log_bucket_position`` in float64."""
    mid = buckets // 2
    distance = np.where((relative < mid) & (relative > -mid), mid - 1, np.abs(relative))
    far = np.ceil(np.log(distance / mid) / np.log((most - 1) / mid) * (mid - 1)) + mid
    return np.where(distance <= mid, relative, far * np.sign(relative)).astype(np.int64)


def literal_logit(folder: Path, ids: list[int], types: list[int]) -> float:
    """One unpadded sequence's logit, transcribed from transformers'
    ``modeling_deberta_v2.py`` step by step, in float64."""
    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    t = {
        k.removeprefix("deberta."): v.astype(np.float64)
        for k, v in load_file(str(folder / "model.safetensors")).items()
    }
    hidden, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    head, n = hidden // heads, len(ids)
    x = t["embeddings.word_embeddings.weight"][ids]
    if cfg.get("position_biased_input", True):
        x = x + t["embeddings.position_embeddings.weight"][:n]
    if cfg.get("type_vocab_size", 0) > 0:
        x = x + t["embeddings.token_type_embeddings.weight"][types]
    x = _ln(x, t, "embeddings.LayerNorm", eps)
    terms = cfg.get("pos_att_type") or []
    terms = terms.split("|") if isinstance(terms, str) else terms
    most = cfg.get("max_relative_positions", -1)
    most = most if most >= 1 else cfg["max_position_embeddings"]
    buckets = cfg.get("position_buckets", -1)
    span = buckets if buckets > 0 else most
    relative = np.arange(n)[:, None] - np.arange(n)[None, :]
    if buckets > 0:
        relative = _buckets(relative, buckets, most)
    rel = t["encoder.rel_embeddings.weight"][: 2 * span]
    if "layer_norm" in cfg.get("norm_rel_ebd", "none"):
        rel = _ln(rel, t, "encoder.LayerNorm", eps)
    scale = math.sqrt(head * (1 + len(terms)))
    share = cfg.get("share_att_key", False)

    def split(y: Array) -> Array:
        return y.reshape(len(y), heads, head).transpose(1, 0, 2)

    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (
            split(_linear(x, t, p + f"attention.self.{m}_proj")) for m in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / scale
        if "c2p" in terms:
            name = "key_proj" if share else "pos_key_proj"
            pos_key = split(_linear(rel, t, p + "attention.self." + name))
            index = np.clip(relative + span, 0, 2 * span - 1)
            full = q @ pos_key.transpose(0, 2, 1)
            scores += np.take_along_axis(full, np.broadcast_to(index, (heads, n, n)), -1) / scale
        if "p2c" in terms:
            name = "query_proj" if share else "pos_query_proj"
            pos_query = split(_linear(rel, t, p + "attention.self." + name))
            index = np.clip(-relative + span, 0, 2 * span - 1)
            full = k @ pos_query.transpose(0, 2, 1)
            gathered = np.take_along_axis(full, np.broadcast_to(index, (heads, n, n)), -1)
            scores += gathered.transpose(0, 2, 1) / scale
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(n, hidden)
        x = _ln(
            x + _linear(context, t, p + "attention.output.dense"),
            t,
            p + "attention.output.LayerNorm",
            eps,
        )
        up = _gelu(_linear(x, t, p + "intermediate.dense"))
        x = _ln(x + _linear(up, t, p + "output.dense"), t, p + "output.LayerNorm", eps)
    pooled = _gelu(_linear(x[0], t, "pooler.dense"))
    return float(_linear(pooled, t, "classifier")[0])


def variant(root: Path, changes: dict[str, Any], tensors: dict[str, tuple[int, ...]]) -> Path:
    """The tiny folder with ``changes`` to its config and random ``tensors`` added or replaced."""
    folder = root / "variant"
    shutil.copytree(FOLDER, folder)
    config = folder / "config.json"
    config.write_text(json.dumps(json.loads(config.read_text()) | changes), encoding="utf-8")
    weights = load_file(str(folder / "model.safetensors"))
    rng = np.random.default_rng(5)
    for name, shape in tensors.items():
        weights["deberta." + name] = (0.2 * rng.standard_normal(shape)).astype(np.float32)
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def pair_ids(model: runtime.Model, query: str, document: str) -> tuple[list[int], list[int]]:
    q = model.tokenizer.encode(query)
    room = model.layout.max_tokens - model.framing.pair
    return q, model.tokenizer.encode(document)[: room - len(q)]


def framed(model: runtime.Model, q: list[int], d: list[int]) -> tuple[list[int], list[int]]:
    f = model.framing
    first = [*f.before, *q, *f.between]
    second = [*d, *f.pair_after]
    return first + second, [0] * len(first) + [f.second_type] * len(second)


def test_the_literal_transcription_gives_the_reference() -> None:
    model = runtime.load(str(FOLDER), runtime="numpy")
    for (query, document), want in zip(REFERENCE["pairs"], REFERENCE["raw_scores"], strict=True):
        ids, types = framed(model, *pair_ids(model, query, document))
        assert abs(literal_logit(FOLDER, ids, types) - want) <= 1e-5


HIDDEN, LAYERS = 64, 2
VARIANTS: dict[str, tuple[dict[str, Any], dict[str, tuple[int, ...]]]] = {
    "own-position-projections": (
        {"share_att_key": False},
        {
            f"encoder.layer.{i}.attention.self.{name}.{part}": shape
            for i in range(LAYERS)
            for name in ("pos_key_proj", "pos_query_proj")
            for part, shape in (("weight", (HIDDEN, HIDDEN)), ("bias", (HIDDEN,)))
        },
    ),
    "c2p-unbucketed-absolute-typed": (
        {
            "pos_att_type": ["c2p"],
            "position_buckets": -1,
            "max_relative_positions": 12,  # clamped: pairs are longer
            "norm_rel_ebd": "none",
            "position_biased_input": True,
            "type_vocab_size": 2,
        },
        {
            "encoder.rel_embeddings.weight": (24, HIDDEN),
            "embeddings.position_embeddings.weight": (512, HIDDEN),
            "embeddings.token_type_embeddings.weight": (2, HIDDEN),
        },
    ),
    "p2c-as-a-string": (
        {"pos_att_type": "p2c", "position_buckets": 8},
        {"encoder.rel_embeddings.weight": (16, HIDDEN)},
    ),
}


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("runtime_name", runtime.RUNTIMES)
def test_each_configuration_matches_the_literal_transcription(
    name: str, runtime_name: str, tmp_path: Path
) -> None:
    if runtime_name == "onnxruntime":
        pytest.importorskip("onnxruntime")
    folder = variant(tmp_path, *VARIANTS[name])
    model = runtime.load(str(folder), runtime=runtime_name, cache_dir=str(tmp_path / "cache"))  # type: ignore[arg-type]
    query = REFERENCE["pairs"][2][0]
    documents = [d for _, d in REFERENCE["pairs"]]
    cut = [pair_ids(model, query, d) for d in documents]
    # One call: documents of every length padded together.
    got = model.rerank(cut[0][0], [d for _, d in cut])
    want = [literal_logit(folder, *framed(model, q, d)) for q, d in cut]
    assert np.abs(got - np.array(want)).max() <= 1e-5


@pytest.mark.parametrize("runtime_name", runtime.RUNTIMES)
def test_a_batch_padded_together_scores_as_each_pair_alone(
    runtime_name: str, tmp_path: Path
) -> None:
    if runtime_name == "onnxruntime":
        pytest.importorskip("onnxruntime")
    model = runtime.load(str(FOLDER), runtime=runtime_name, cache_dir=str(tmp_path))  # type: ignore[arg-type]
    query = REFERENCE["pairs"][0][0]
    cut = [pair_ids(model, query, d) for _, d in REFERENCE["pairs"]]
    together = model.rerank(cut[0][0], [d for _, d in cut])
    alone = [float(model.rerank(q, [d])[0]) for q, d in cut]
    assert np.abs(together - np.array(alone)).max() <= 1e-5


def test_the_relative_buckets_are_torchs_in_float32() -> None:
    """mxbai's sizes (256 buckets, 512 positions): every distance, including
    the longest, whose log ratio is exactly 1 (its ``ceil`` must not round up)."""
    relative = np.arange(-511, 512)
    got = log_bucket(relative, 256, 512)
    assert got[-1] == 255 and got[0] == -255
    assert (got == _buckets(relative, 256, 512)).all()
    assert (got[511 - 127 : 511 + 128] == relative[511 - 127 : 511 + 128]).all()


def test_int8_scores_close_to_float32(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    exact = runtime.load(str(FOLDER), runtime="onnxruntime", cache_dir=str(tmp_path))
    int8 = runtime.load(
        str(FOLDER), runtime="onnxruntime", quantize="int8", cache_dir=str(tmp_path)
    )
    # a cross-encoder's loss is a score difference: one value has no cosine
    assert int8.min_cosine is None and int8.identity.endswith("-int8")
    assert int8.max_score_delta is not None and 0 < int8.max_score_delta <= INT8_MAX_DELTA
    cut = [pair_ids(exact, q, d) for q, d in REFERENCE["pairs"]]
    a = np.array([float(exact.rerank(q, [d])[0]) for q, d in cut])
    b = np.array([float(int8.rerank(q, [d])[0]) for q, d in cut])
    assert np.abs(a - b).max() <= INT8_MAX_DELTA, np.abs(a - b)


REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "conv_kernel_size": ({"conv_kernel_size": 3}, "conv_kernel_size"),
    "relative_attention": ({"relative_attention": False}, "relative_attention false"),
    "pos_att_type": ({"pos_att_type": ["p2c", "p2p"]}, "pos_att_type ['p2p']"),
    "embedding_size": ({"embedding_size": 32}, "embedding_size"),
    "pooler_hidden_act": ({"pooler_hidden_act": "relu"}, "pooler_hidden_act 'relu'"),
    "hidden_act": ({"hidden_act": "gelu_new"}, "hidden_act 'gelu_new'"),
}


@pytest.mark.parametrize("key", REFUSED)
def test_a_configuration_not_served_is_refused_naming_config_json(key: str, tmp_path: Path) -> None:
    changes, words = REFUSED[key]
    folder = variant(tmp_path, changes, {})
    with pytest.raises(ModelFilesError) as refused:
        runtime.load(str(folder), runtime="numpy")
    message = str(refused.value)
    assert str(folder / "config.json") in message and words in message
    assert "not supported" in message
