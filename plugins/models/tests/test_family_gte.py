"""GTE v1.5 (``model_type = "new"``, ``NewModel``), proved without a reference.

Its only reference implementation is remote code (Alibaba-NLP/new-impl),
which Synapse never runs, and no transformers or torch output exists here.
So the proof has two parts, both on tiny random folders generated here
(seeded) with the hub's tensor names and config keys:

- numpy and onnxruntime agree with each other, padded in batches or alone;
- both agree (within 1e-5) with :func:`transcribed`, a float64 transcription
  of the remote code's forward pass written from its text (its
  ``NewEmbeddings``, ``NTKScalingRotaryEmbedding``, ``NewAttention``,
  ``NewGatedMLP`` and ``NewLayer``), one unpadded sequence at a time as its
  ``unpad_inputs`` path runs, sharing nothing with ``families/gte.py``.

What this does not check: that the real checkpoints hold these names (TEI's
``gte.rs`` reads the same ones from the hub's files), nor anything that the
transcription and the family could both have read wrongly from the remote
code's text.
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
from synapse_models.testing import DATA

#: a BERT WordPiece tokenizer and the sentence-transformers files around it
#: (CLS pooling, Normalize), as gte-base-en-v1.5's folder has them
BERT = DATA / "tiny-models" / "bert-cls"
TEXTS = [
    "a",
    "Synapse serves embedding models to many callers at once.",
    "The weather in Lisbon is mild in winter, and the trams climb the hills "
    "past the old castle while the river shines below the city.",
    "What is the capital of France? Paris is the capital and most populous city of France.",
    "  spaces around  ",
]
HIDDEN, HEADS, LAYERS, INTERMEDIATE, VOCAB = 32, 4, 2, 48, 448
#: the keys of gte-base-en-v1.5's config.json (sizes shrunk; ``auto_map`` kept,
#: never followed)
CONFIG: dict[str, Any] = {
    "architectures": ["NewModel"],
    "auto_map": {
        "AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
        "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel",
    },
    "attention_probs_dropout_prob": 0.0,
    "classifier_dropout": None,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": HIDDEN,
    "initializer_range": 0.02,
    "intermediate_size": INTERMEDIATE,
    "layer_norm_eps": 1e-12,
    "layer_norm_type": "layer_norm",
    "logn_attention_clip1": False,
    "logn_attention_scale": False,
    "max_position_embeddings": 128,
    "model_type": "new",
    "num_attention_heads": HEADS,
    "num_hidden_layers": LAYERS,
    "pack_qkv": True,
    "pad_token_id": 0,
    "position_embedding_type": "rope",
    # a small base, so that positions (and the NTK factor) matter in short texts
    "rope_scaling": {"factor": 2.0, "type": "ntk"},
    "rope_theta": 1000.0,
    "torch_dtype": "float32",
    "transformers_version": "4.39.1",
    "type_vocab_size": 0,
    "unpad_inputs": True,
    "use_memory_efficient_attention": True,
    "vocab_size": VOCAB,
}


def tensors_of(config: dict[str, Any], seed: int, prefix: str = "") -> dict[str, Any]:
    """Random weights by the remote code's names (torch layout: (out, in))."""
    rng = np.random.default_rng(seed)
    hidden, inner = config["hidden_size"], config["intermediate_size"]

    def normal(*shape: int, scale: float = 0.2) -> Any:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out: dict[str, Any] = {
        "embeddings.word_embeddings.weight": normal(config["vocab_size"], hidden, scale=1.0),
        "embeddings.LayerNorm.weight": 1.0 + normal(hidden, scale=0.1),
        "embeddings.LayerNorm.bias": normal(hidden, scale=0.1),
    }
    if config["type_vocab_size"] > 0:
        out["embeddings.token_type_embeddings.weight"] = normal(
            config["type_vocab_size"], hidden, scale=0.5
        )
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        qkv_w, qkv_b = normal(3 * hidden, hidden), normal(3 * hidden, scale=0.1)
        if config["pack_qkv"]:
            out[p + "attention.qkv_proj.weight"] = qkv_w
            out[p + "attention.qkv_proj.bias"] = qkv_b
        else:
            for n, part in enumerate("qkv"):
                rows = slice(n * hidden, (n + 1) * hidden)
                out[p + f"attention.{part}_proj.weight"] = np.ascontiguousarray(qkv_w[rows])
                out[p + f"attention.{part}_proj.bias"] = np.ascontiguousarray(qkv_b[rows])
        out |= {
            p + "attention.o_proj.weight": normal(hidden, hidden),
            p + "attention.o_proj.bias": normal(hidden, scale=0.1),
            p + "attn_ln.weight": 1.0 + normal(hidden, scale=0.1),
            p + "attn_ln.bias": normal(hidden, scale=0.1),
            p + "mlp.up_gate_proj.weight": normal(2 * inner, hidden),
            p + "mlp.down_proj.weight": normal(hidden, inner),
            p + "mlp.down_proj.bias": normal(hidden, scale=0.1),
            p + "mlp_ln.weight": 1.0 + normal(hidden, scale=0.1),
            p + "mlp_ln.bias": normal(hidden, scale=0.1),
        }
    return {prefix + name: value for name, value in out.items()}


def make_folder(
    root: Path, seed: int = 7, prefix: str = "", **changes: Any
) -> tuple[Path, dict[str, Any]]:
    """A gte-base-en-v1.5-shaped folder: config, weights, BERT tokenizer, CLS + Normalize."""
    folder = root / f"gte-{seed}{prefix.strip('.')}"
    shutil.copytree(BERT, folder)
    (folder / "model.safetensors").unlink()
    (folder / "config_sentence_transformers.json").unlink()
    config = CONFIG | changes
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    pooling = json.loads((folder / "1_Pooling/config.json").read_text(encoding="utf-8"))
    pooling["word_embedding_dimension"] = config["hidden_size"]
    (folder / "1_Pooling/config.json").write_text(json.dumps(pooling), encoding="utf-8")
    save_file(tensors_of(config, seed, prefix), str(folder / "model.safetensors"))
    return folder, config


# -- the remote code's forward pass, transcribed in float64 --------------------------------


def transcribed(folder: Path, ids: list[int], ntk: bool = True) -> Any:
    """The last hidden state (length, hidden) of one sequence, as the remote
    code computes it, in float64; ``ntk`` false ignores ``rope_scaling`` (to
    show it matters)."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    raw = load_file(str(folder / "model.safetensors"))
    w = {k.removeprefix("new."): v.astype(np.float64) for k, v in raw.items()}
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    dim = hidden // heads
    eps, inner = config["layer_norm_eps"], config["intermediate_size"]
    length = len(ids)

    def ln(x: Any, name: str) -> Any:  # nn.LayerNorm
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def linear(x: Any, name: str, bias: bool = True) -> Any:  # nn.Linear
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if bias else y

    # NewEmbeddings: word (+ token type 0) embeddings, LayerNorm; no position table.
    x = w["embeddings.word_embeddings.weight"][ids]
    if config["type_vocab_size"] > 0:
        x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, "embeddings.LayerNorm")

    # RotaryEmbedding / NTKScalingRotaryEmbedding: inv_freq = 1 / base^(2i/dim);
    # the NTK table is built for max_position_embeddings * factor positions,
    # past max_position_embeddings, so it always takes the scaled branch:
    # base * factor, then inv_freq / factor^(2/dim).
    base = float(config["rope_theta"])
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    scaling = config.get("rope_scaling")
    if ntk and scaling is not None:
        factor = float(scaling["factor"])
        if config["max_position_embeddings"] * factor > config["max_position_embeddings"]:
            inv_freq = 1.0 / (base * factor) ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
            inv_freq = inv_freq / factor ** (2 / dim)
    freqs = np.einsum("i,j->ij", np.arange(length, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]  # (length, 1, dim)

    def rotate_half(t: Any) -> Any:
        return np.concatenate([-t[..., dim // 2 :], t[..., : dim // 2]], axis=-1)

    erf = np.vectorize(math.erf)
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        # NewAttention: packed qkv split by all_head_size, viewed (length, heads, dim).
        if config.get("pack_qkv", True):
            q, k, v = np.split(linear(x, p + "attention.qkv_proj"), 3, axis=-1)
        else:
            q, k, v = (linear(x, p + f"attention.{n}_proj") for n in "qkv")
        q, k, v = (t.reshape(length, heads, dim) for t in (q, k, v))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        # one unpadded sequence: every key is seen (BlockDiagonalMask of one block)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(dim)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        context = np.einsum("hqk,khd->qhd", probs, v).reshape(length, hidden)
        # NewLayer: post-norm around attention, then around the gated MLP.
        x = ln(x + linear(context, p + "attention.o_proj"), p + "attn_ln")
        up_gate = linear(x, p + "mlp.up_gate_proj", bias=False)
        up, gate = up_gate[:, :inner], up_gate[:, inner:]
        gate = gate * 0.5 * (1.0 + erf(gate / math.sqrt(2.0)))  # ACT2FN["gelu"]
        x = ln(x + linear(gate * up, p + "mlp.down_proj"), p + "mlp_ln")
    return x


def reference_vectors(folder: Path, model: runtime.Model, texts: list[str]) -> Any:
    """sentence-transformers' CLS pooling and Normalize over :func:`transcribed`."""
    framing = model.framing
    out = []
    for text in texts:
        ids = [*framing.before, *model.tokenizer.encode(text), *framing.after]
        cls = transcribed(folder, ids)[0]
        out.append(cls / np.linalg.norm(cls))
    return np.array(out)


def cosines(a: Any, b: Any) -> Any:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def embed(model: runtime.Model, texts: list[str]) -> Any:
    return model.embed([model.tokenizer.encode(t) for t in texts])


# -- the tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "new."])
@pytest.mark.parametrize("kind", runtime.RUNTIMES)
def test_both_runtimes_equal_the_transcribed_remote_code(
    tmp_path: Path, onnx_cache: Path, kind: runtime.Runtime, prefix: str
) -> None:
    if kind == "onnxruntime":
        pytest.importorskip("onnxruntime")
    folder, _ = make_folder(tmp_path, prefix=prefix)
    model = runtime.load(str(folder), runtime=kind, cache_dir=str(onnx_cache))
    assert model.layout.kind == "gte-cls-norm" and model.dims == HIDDEN
    want = reference_vectors(folder, model, TEXTS)
    got = embed(model, TEXTS)  # one padded batch of unequal lengths
    assert np.abs(got - want).max() <= 1e-5
    assert cosines(got, want).min() >= 0.99999
    alone = np.concatenate([embed(model, [t]) for t in TEXTS])
    assert np.abs(alone - got).max() <= 1e-6


def test_the_token_vectors_equal_the_transcription_and_ntk_matters(tmp_path: Path) -> None:
    folder, _ = make_folder(tmp_path, seed=11)
    model = runtime.load(str(folder), runtime="numpy")
    weights = runtime.read_weights(model.files, model.layout)
    framing = model.framing
    ids = [*framing.before, *model.tokenizer.encode(TEXTS[2]), *framing.after]
    packed = np.array([ids], dtype=np.int64)
    hidden = weights.family.hidden_states(
        weights.body, packed, np.zeros_like(packed), np.ones(packed.shape, np.float32)
    )[0]
    want = transcribed(folder, ids)
    assert np.abs(hidden - want).max() <= 1e-5
    # The check can tell NTK scaling from none: without it the vectors move.
    assert np.abs(transcribed(folder, ids, ntk=False) - want).max() > 1e-3


def test_the_multilingual_layout_token_types_and_unpacked_qkv(tmp_path: Path) -> None:
    """gte-multilingual-base's switches: one token type (added to every
    position), and ``pack_qkv`` false (``q_proj``, ``k_proj``, ``v_proj``)."""
    folder, _ = make_folder(tmp_path, seed=5, type_vocab_size=1, pack_qkv=False)
    model = runtime.load(str(folder), runtime="numpy")
    got = embed(model, TEXTS)
    assert np.abs(got - reference_vectors(folder, model, TEXTS)).max() <= 1e-5
    # The same weights packed give the same vectors.
    packed, _ = make_folder(tmp_path / "packed", seed=5, type_vocab_size=1)
    same = embed(runtime.load(str(packed), runtime="numpy"), TEXTS)
    assert np.abs(same - got).max() <= 1e-6


def test_int8_serves_gte_and_reports_its_loss(tmp_path: Path, onnx_cache: Path) -> None:
    pytest.importorskip("onnxruntime")
    folder, _ = make_folder(tmp_path)
    model = runtime.load(str(folder), quantize="int8", cache_dir=str(onnx_cache))
    assert model.identity.endswith(":onnxruntime-int8")
    # random weights at hidden 32 quantize worse than trained ones: a bound
    # on regressions, not a promise
    assert model.min_cosine is not None and model.min_cosine >= 0.99
    want = reference_vectors(folder, model, TEXTS)
    assert cosines(embed(model, TEXTS), want).min() >= 0.99


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rope_scaling": {"type": "ntk", "factor": 2.0, "mixed_b": 0.5}}, "mixed_b"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "supported: type 'ntk'"),
        ({"logn_attention_scale": True}, "logn_attention_scale true is not supported"),
        ({"layer_norm_type": "rms_norm"}, "layer_norm_type 'rms_norm' is not supported"),
        ({"position_embedding_type": "absolute"}, "position_embedding_type 'absolute'"),
        ({"hidden_act": "relu"}, "hidden_act 'relu' is not supported"),
    ],
)
def test_a_config_it_cannot_serve_is_refused_naming_the_file(
    tmp_path: Path, change: dict[str, Any], words: str
) -> None:
    folder, _ = make_folder(tmp_path, **change)
    with pytest.raises(ModelFilesError) as refused:
        runtime.load(str(folder), runtime="numpy")
    assert str(folder / "config.json") in str(refused.value)
    assert words in str(refused.value)
