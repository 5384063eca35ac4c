"""Six tiny random models in the hub's layouts against what sentence-transformers
and transformers computed for them (``data/tiny-models/reference.json``), on
each runtime: BERT (CLS + Normalize; mean, no Normalize), XLM-RoBERTa (mean,
prompts), MPNet (relative position bias), and BERT and XLM-R cross-encoders.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from synapse_models import files, folder, packing
from synapse_models import model as runtime

TINY = Path(__file__).parent / "data" / "tiny-models"
REFERENCE: dict[str, Any] = json.loads((TINY / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
EMBEDDERS = [name for name, m in REFERENCE.items() if m["kind"] == "embed"]
CROSS_ENCODERS = [name for name, m in REFERENCE.items() if m["kind"] == "rerank"]
MIN_COSINE = 0.99999
MAX_SCORE_DELTA = 1e-5
#: the relative difference allowed in a raw (not normalised) vector's length
MAX_LENGTH_DELTA = 1e-5

_models: dict[tuple[str, str], runtime.Model] = {}


@pytest.fixture(params=runtime.RUNTIMES)
def runtime_name(request: pytest.FixtureRequest) -> str:
    if request.param == "onnxruntime":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnx")
    return str(request.param)


def loaded(name: str, runtime_name: str, cache: Path) -> runtime.Model:
    """Each tiny model once per process and runtime (loading builds its graph)."""
    key = (name, runtime_name)
    if key not in _models:
        _models[key] = runtime.load(str(TINY / name), runtime=runtime_name, cache_dir=str(cache))  # type: ignore[arg-type]
    return _models[key]


def cosines(vectors: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (vectors * expected).sum(axis=1) / (  # type: ignore[no-any-return]
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(expected, axis=1)
    )


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def check_vectors(vectors: Any, expected: Any, normalized: bool) -> None:
    got, want = np.asarray(vectors, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == want.shape
    assert cosines(got, want).min() >= MIN_COSINE, cosines(got, want)
    lengths, expected_lengths = np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1)
    relative = np.abs(lengths - expected_lengths) / expected_lengths
    assert relative.max() <= MAX_LENGTH_DELTA, (lengths, expected_lengths)
    if normalized:
        assert np.allclose(lengths, 1.0, atol=1e-6)


@pytest.mark.parametrize("name", EMBEDDERS)
def test_each_embedder_matches_its_reference(
    name: str, runtime_name: str, onnx_cache: Path
) -> None:
    ref = REFERENCE[name]
    model = loaded(name, runtime_name, onnx_cache)
    ceiling = model.layout.max_tokens
    assert ceiling == ref["max_tokens"]
    # sentence-transformers cut texts over max_seq_length: so does the reference.
    single = model.framing.single
    ids = [model.tokenizer.encode(text)[: ceiling - single] for text in ref["texts"]]
    cut = max(ref["tokens"]) > ceiling  # xlmr-mean's longest text (242 tokens)
    assert any(len(i) + single == ceiling for i in ids) == cut
    check_vectors(model.embed(ids), ref["vectors"], ref["normalize"])


@pytest.mark.parametrize("name", CROSS_ENCODERS)
def test_each_cross_encoder_matches_its_reference(
    name: str, runtime_name: str, onnx_cache: Path
) -> None:
    ref = REFERENCE[name]
    model = loaded(name, runtime_name, onnx_cache)
    encode = model.tokenizer.encode
    logits = [float(model.rerank(encode(q), [encode(d)])[0]) for q, d in ref["pairs"]]
    assert np.abs(np.array(logits) - ref["raw_scores"]).max() <= MAX_SCORE_DELTA
    assert np.abs(np.array([sigmoid(x) for x in logits]) - ref["scores"]).max() <= MAX_SCORE_DELTA
    # One query with all its documents in one call: the same logits.
    query = ref["pairs"][0][0]
    docs = [d for q, d in ref["pairs"] if q == query]
    together = model.rerank(encode(query), [encode(d) for d in docs])
    assert np.abs(together - logits[: len(docs)]).max() <= 1e-6


def test_prompted_texts_match_the_prompted_reference(runtime_name: str, onnx_cache: Path) -> None:
    ref = REFERENCE["xlmr-mean"]
    model = loaded("xlmr-mean", runtime_name, onnx_cache)
    assert model.layout.prompts == ref["prompts"] == {"query": "query: ", "passage": "passage: "}
    for name, prompt in ref["prompts"].items():
        ids = [model.tokenizer.encode(prompt + text) for text in ref["texts"][:4]]
        check_vectors(model.embed(ids), ref["prompted"][name], normalized=True)
    # And the prompts change the vectors: they are not the unprompted ones.
    assert cosines(np.array(ref["prompted"]["query"]), np.array(ref["vectors"][:4])).min() < 0.999


def test_token_counts_match_the_models_tokenizers() -> None:
    for name, ref in REFERENCE.items():
        tokenizer = loaded(name, "numpy", Path()).tokenizer
        if ref["kind"] == "embed":
            # sentence-transformers strips each text first; the counts are of the text as given
            for text, tokens in zip(ref["texts"], ref["tokens"], strict=True):
                if text == text.strip():
                    assert tokenizer.sequence_length(tokenizer.encode(text)) == tokens, (name, text)
        else:
            for (q, d), tokens in zip(ref["pairs"], ref["pair_tokens"], strict=True):
                assert tokenizer.sequence_length(tokenizer.encode(d), tokenizer.encode(q)) == tokens


def test_the_layouts_are_read_from_the_folders() -> None:
    layouts = {name: folder.read_layout(TINY / name) for name in REFERENCE}
    kinds = {name: layout.kind for name, layout in layouts.items()}
    assert kinds == {
        "bert-cls": "bert-cls-norm",
        "bert-mean-raw": "bert-mean-raw",
        "xlmr-mean": "xlm-roberta-mean-norm",
        "mpnet-mean": "mpnet-mean-norm",
        "bert-rerank": "bert-cross-encoder",
        "xlmr-rerank": "xlm-roberta-cross-encoder",
    }
    for name, layout in layouts.items():
        # max_seq_length (or the tokenizer's model_max_length) is 128; the
        # position tables hold 130 rows after XLM-R's and MPNet's offset of 2
        assert (layout.max_tokens, layout.positions) == (128, 130), name
        assert layout.buckets() == (32, 64, 128)
        assert layout.offset == (0 if layout.architecture == "bert" else 2)


def test_identities_name_architecture_pooling_weights_and_runtime(onnx_cache: Path) -> None:
    identities = {loaded(name, "numpy", onnx_cache).identity for name in REFERENCE}
    assert len(identities) == len(REFERENCE)
    model = loaded("bert-cls", "numpy", onnx_cache)
    assert model.identity == f"cpu:bert-cls:bert-cls-norm:{model.sha256[:8]}:numpy"


def _pooled_by_hand(model: runtime.Model, ids: list[list[int]], pooling: str) -> Any:
    weights = runtime.read_weights(model.files, model.layout)
    packed = packing.pack(ids, model.framing)
    hidden = weights.family.hidden_states(weights.body, *packed).astype(np.float64)
    mask = packed[2].astype(bool)
    if pooling == "max":
        return np.stack([h[m].max(axis=0) for h, m in zip(hidden, mask, strict=True)])
    return np.stack([h[m][-1] for h, m in zip(hidden, mask, strict=True)])


@pytest.mark.parametrize("pooling", ["max", "lasttoken"])
def test_max_and_last_token_pooling_agree_across_runtimes(
    pooling: str, tmp_path: Path, onnx_cache: Path
) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    root = tmp_path / "model"
    copy_folder(TINY / "bert-mean-raw", root)
    config = root / "1_Pooling" / "config.json"
    data = json.loads(config.read_text())
    data["pooling_mode_mean_tokens"] = False
    data[{"max": "pooling_mode_max_tokens", "lasttoken": "pooling_mode_lasttoken"}[pooling]] = True
    config.write_text(json.dumps(data))
    numpy_model = runtime.load(str(root), runtime="numpy")
    onnx_model = runtime.load(str(root), runtime="onnxruntime", cache_dir=str(onnx_cache))
    assert numpy_model.layout.pooling == pooling
    assert numpy_model.identity.split(":")[2] == f"bert-{pooling}-raw"
    texts = REFERENCE["bert-mean-raw"]["texts"][:8]
    ids = [numpy_model.tokenizer.encode(t) for t in texts]
    by_hand = _pooled_by_hand(numpy_model, ids, pooling)
    for model in (numpy_model, onnx_model):
        assert np.abs(model.embed(ids) - by_hand).max() <= 1e-5


def copy_folder(source: Path, target: Path) -> None:
    """A copy of a model folder whose JSON files a test may change."""
    import shutil

    shutil.copytree(source, target)


@pytest.mark.parametrize(
    ("name", "change", "problem"),
    [
        ("bert-cls", ("config.json", {"model_type": "gpt2"}), "model_type 'gpt2' is not supported"),
        (
            "bert-rerank",
            ("config.json", {"architectures": ["BertForTokenClassification"]}),
            None,  # not a sequence classifier: read as an encoder, which needs its pooling
        ),
        (
            "bert-rerank",
            # Two labels are a classifier (test_classifier.py); a regression head is not.
            ("config.json", {"id2label": {"0": "NO", "1": "YES"}, "problem_type": "regression"}),
            "problem_type 'regression' is not supported",
        ),
        (
            "bert-cls",
            (
                "1_Pooling/config.json",
                {"pooling_mode_cls_token": False, "pooling_mode_weightedmean_tokens": True},
            ),
            "pooling ['pooling_mode_weightedmean_tokens'] is not supported",
        ),
        ("bert-cls", ("config.json", {"hidden_act": "relu"}), "hidden_act 'relu' is not supported"),
    ],
)
def test_unsupported_folders_are_typed_errors_naming_the_file(
    tmp_path: Path, name: str, change: tuple[str, dict[str, Any]], problem: str | None
) -> None:
    root = tmp_path / name
    copy_folder(TINY / name, root)
    file, fields = change
    data = json.loads((root / file).read_text())
    (root / file).write_text(json.dumps({**data, **fields}))
    with pytest.raises(files.ModelFilesError) as raised:
        files.check_present(files.ModelFiles(root, name, None))
    if problem is None:
        assert raised.value.path == str(root / files.POOLING)
        assert "missing the sentence-transformers pooling config" in str(raised.value)
    else:
        assert raised.value.path == str(root / file)
        assert problem in str(raised.value) and "supported" in str(raised.value)


def _with_dense(root: Path, weight: Any, bias: Any | None, activation: str) -> None:
    """Adds a sentence-transformers Dense module after the pooling of ``root``."""
    from safetensors.numpy import save_file

    modules = json.loads((root / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "2_Dense").mkdir()
    config = {
        "in_features": weight.shape[1],
        "out_features": weight.shape[0],
        "bias": bias is not None,
        "activation_function": activation,
    }
    (root / "2_Dense" / "config.json").write_text(json.dumps(config))
    tensors = {"linear.weight": weight} | ({} if bias is None else {"linear.bias": bias})
    save_file(tensors, str(root / "2_Dense" / "model.safetensors"))


@pytest.mark.parametrize("activation", ["Identity", "Tanh"])
def test_a_dense_module_follows_the_pooling_in_both_runtimes(
    tmp_path: Path, runtime_name: str, onnx_cache: Path, activation: str
) -> None:
    """sentence-transformers' Dense: ``act(pooled @ W.T + b)``, then Normalize."""
    root = tmp_path / "dense"
    copy_folder(TINY / "bert-mean-raw", root)
    plain = loaded("bert-mean-raw", "numpy", onnx_cache)
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((24, plain.dims)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    names = {
        "Identity": "torch.nn.modules.linear.Identity",
        "Tanh": "torch.nn.modules.activation.Tanh",
    }
    _with_dense(root, weight, bias, names[activation])
    model = runtime.load(str(root), runtime=runtime_name, cache_dir=str(onnx_cache))  # type: ignore[arg-type]
    assert model.dims == 24 and model.layout.kind == "bert-mean-dense1-raw"
    ids = [model.tokenizer.encode(t) for t in ("a short text", "and another, a little longer")]
    expected = plain.embed(ids).astype(np.float64) @ weight.T.astype(np.float64) + bias
    if activation == "Tanh":
        expected = np.tanh(expected)
    got = model.embed(ids)
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()


def test_a_dense_module_without_its_weights_is_refused_naming_the_file(tmp_path: Path) -> None:
    root = tmp_path / "dense"
    copy_folder(TINY / "bert-cls", root)
    _with_dense(root, np.ones((4, 32), dtype=np.float32), None, "torch.nn.modules.linear.Identity")
    (root / "2_Dense" / "model.safetensors").unlink()
    with pytest.raises(files.ModelFilesError, match="Dense module's weights") as raised:
        folder.read_layout(root)
    assert raised.value.path == str(root / "2_Dense" / "model.safetensors")


def test_an_unknown_module_is_refused_naming_modules_json(tmp_path: Path) -> None:
    root = tmp_path / "other"
    copy_folder(TINY / "bert-cls", root)
    modules = json.loads((root / "modules.json").read_text())
    modules.insert(
        2, {"idx": 2, "path": "2_LayerNorm", "type": "sentence_transformers.models.LayerNorm"}
    )
    (root / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(files.ModelFilesError, match="any Dense modules") as raised:
        folder.read_layout(root)
    assert raised.value.path == str(root / "modules.json")


def test_a_ceiling_is_never_past_the_positions(tmp_path: Path) -> None:
    root = tmp_path / "long"
    copy_folder(TINY / "bert-cls", root)
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 4096}))
    layout = folder.read_layout(root)
    assert layout.max_tokens == 130 and layout.buckets() == (32, 64, 128, 130)
    assert attrs.evolve(layout, max_tokens=512).buckets() == (32, 64, 128, 256, 512)


def test_spin_wait_false_makes_sessions_whose_threads_sleep(onnx_cache: Path) -> None:
    """``spinning=False`` reaches the forward pass's sessions; the default
    keeps onnxruntime's own (spinning). Either way the pool stops
    spinning when a run returns."""
    pytest.importorskip("onnxruntime")
    key = "session.intra_op.allow_spinning"
    root = str(TINY / EMBEDDERS[0])
    for spinning, entry in ((False, "0"), (True, "")):
        model = runtime.load(
            root, runtime="onnxruntime", cache_dir=str(onnx_cache), spinning=spinning
        )
        forward = model.run.__self__  # type: ignore[attr-defined]
        assert isinstance(forward, runtime.OnnxSessions)
        options = forward.session(1).get_session_options()
        assert _config_entry(options, key) == entry
        assert _config_entry(options, "session.force_spinning_stop") == "1"


def _config_entry(options: Any, key: str) -> str:
    """A session option's value, "" when it is not set (onnxruntime's default)."""
    try:
        return str(options.get_session_config_entry(key))
    except RuntimeError:
        return ""


def test_an_edited_config_is_a_new_graph_never_a_stale_one(
    tmp_path: Path, onnx_cache: Path
) -> None:
    """The cached graph's name covers config.json and the module configs, not
    only the weights: a changed layer norm epsilon builds its own graph."""
    pytest.importorskip("onnxruntime")
    root = tmp_path / "edited"
    copy_folder(TINY / "bert-mean-raw", root)
    before = runtime.load(str(root), runtime="onnxruntime", cache_dir=str(onnx_cache))
    config = json.loads((root / "config.json").read_text())
    config["layer_norm_eps"] = 0.5
    (root / "config.json").write_text(json.dumps(config))
    after = runtime.load(str(root), runtime="onnxruntime", cache_dir=str(onnx_cache))
    assert after.graph != before.graph and after.sha256 == before.sha256
    by_numpy = runtime.load(str(root), runtime="numpy")
    ids = [after.tokenizer.encode("an edited model")]
    assert np.abs(after.embed(ids) - by_numpy.embed(ids)).max() <= 1e-5
    assert np.abs(after.embed(ids) - before.embed(ids)).max() > 1e-3
