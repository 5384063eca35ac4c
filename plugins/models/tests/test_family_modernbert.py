"""What is specific to the ModernBERT family, beyond its references
(``test_families.py``): the local layers' window with padding, the
transformers-5 spelling of its config, int8 on both of its folders, the
int8 products it keeps in float32, and the configs it refuses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from synapse_models import model as runtime
from synapse_models import quantize
from synapse_models.errors import ModelFilesError
from synapse_models.families.modernbert import MODERNBERT
from synapse_models.testing import DATA

TINY2 = DATA / "tiny-models-2"
REFERENCE: dict[str, Any] = json.loads((TINY2 / "reference.json").read_text(encoding="utf-8"))[
    "models"
]
#: worst int8 loss measured on the tiny folders (random weights, hidden 32
#: and 64: coarser than a trained model's), with a margin
INT8_MIN_COSINE = 0.99  # measured 0.9978 (the reference texts), 0.9981 (the fixed texts)
INT8_MAX_LOGIT_DELTA = 0.5  # measured 0.31 on the reference pairs (logits -3.8 to 1.4)
#: the worst logit difference load() measures, on the fixed texts (single sequences)
INT8_MAX_MEASURED_DELTA = 1.0  # measured 0.76


def ids(model: runtime.Model, text: str) -> list[int]:
    cut = model.layout.max_tokens - model.framing.single
    encoding: Any = model.tokenizer.load().encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    return list(encoding.ids)[:cut]


def cosines(got: Any, want: Any) -> Any:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def copy_with(
    tmp_path: Path, name: str, change: dict[str, Any], drop: tuple[str, ...] = ()
) -> Path:
    """A copy of the tiny folder ``name`` with its ``config.json`` changed."""
    root = tmp_path / name
    shutil.copytree(TINY2 / name, root)
    path = root / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config = {k: v for k, v in config.items() if k not in drop} | change
    path.write_text(json.dumps(config), encoding="utf-8")
    return root


@pytest.mark.parametrize("runtime_name", runtime.RUNTIMES)
def test_a_short_text_padded_far_past_the_window_keeps_its_vector(
    runtime_name: str, onnx_cache: Path
) -> None:
    """Padding queries beyond a local layer's window see only padding keys:
    their scores must stay finite (no NaN leaking through the masked keys)."""
    if runtime_name == "onnxruntime":
        pytest.importorskip("onnxruntime")
    ref = REFERENCE["modernbert-cls"]
    model = runtime.load(
        str(TINY2 / "modernbert-cls"),
        runtime=runtime_name,  # type: ignore[arg-type]
        cache_dir=str(onnx_cache),
    )
    short, long = ids(model, ref["texts"][8]), ids(model, ref["texts"][12])  # "a"; 62 tokens
    assert len(long) - len(short) > 2 * 8 + 1
    batched = model.embed([short, long])
    assert np.isfinite(batched).all()
    alone = np.concatenate([model.embed([short]), model.embed([long])])
    assert cosines(batched, alone).min() >= 0.99999
    assert cosines(batched, [ref["vectors"][8], ref["vectors"][12]]).min() >= 0.99999


def test_a_transformers_5_config_reads_as_the_hubs(tmp_path: Path) -> None:
    """``layer_types`` and ``rope_parameters`` (what transformers 5 saves)
    say what ``global_attn_every_n_layers`` and the two thetas say."""
    root = copy_with(
        tmp_path,
        "modernbert-cls",
        {
            "layer_types": ["full_attention", *["sliding_attention"] * 2, "full_attention"],
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            },
        },
        drop=("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"),
    )
    ref = REFERENCE["modernbert-cls"]
    model = runtime.load(str(root), runtime="numpy")
    vectors = model.embed([ids(model, t) for t in ref["texts"][:12]])
    assert cosines(vectors, ref["vectors"][:12]).min() >= 0.99999


def test_int8_embeds_close_to_float32(onnx_cache: Path) -> None:
    pytest.importorskip("onnxruntime")
    ref = REFERENCE["modernbert-cls"]
    model = runtime.load(str(TINY2 / "modernbert-cls"), quantize="int8", cache_dir=str(onnx_cache))
    assert model.identity.endswith(":onnxruntime-int8")
    assert model.min_cosine is not None and model.min_cosine >= INT8_MIN_COSINE
    vectors = model.embed([ids(model, t) for t in ref["texts"]])
    assert cosines(vectors, ref["vectors"]).min() >= INT8_MIN_COSINE


def test_int8_scores_pairs_close_to_float32(onnx_cache: Path) -> None:
    pytest.importorskip("onnxruntime")
    ref = REFERENCE["modernbert-rerank"]
    model = runtime.load(
        str(TINY2 / "modernbert-rerank"), quantize="int8", cache_dir=str(onnx_cache)
    )
    assert model.identity.endswith(":onnxruntime-int8")
    assert model.min_cosine is None
    assert model.max_score_delta is not None
    assert model.max_score_delta <= INT8_MAX_MEASURED_DELTA
    pairs = ref["pairs"][:3] + ref["pairs"][4:]  # the fourth is over the ceiling
    encode = model.tokenizer.encode
    logits = [float(model.rerank(encode(q), [encode(d)])[0]) for q, d in pairs]
    want = ref["raw_scores"][:3] + ref["raw_scores"][4:]
    assert np.abs(np.array(logits) - want).max() <= INT8_MAX_LOGIT_DELTA


def test_int8_keeps_the_fused_geglu_products_it_names(onnx_cache: Path) -> None:
    """The shared rule finds layer 0's ``mlp.Wo`` and layer 2's ``mlp.Wi``
    (one product for the input and gate halves, split after it)."""
    pytest.importorskip("onnxruntime")
    import onnx

    model = runtime.load(str(TINY2 / "modernbert-cls"), cache_dir=str(onnx_cache))
    assert model.graph is not None
    graph = onnx.load(str(model.graph))
    for index, node in enumerate(graph.graph.node):
        node.name = node.name or f"{node.op_type}_{index}"
    shapes = {t.name: tuple(t.dims) for t in graph.graph.initializer}
    products = [
        (node.name, shapes[node.input[1]])
        for node in graph.graph.node
        if node.op_type == "MatMul" and len(shapes.get(node.input[1], ())) == 2
    ]
    hidden, intermediate = 32, 48
    # Per layer: Wqkv, Wo, Wi, mlp.Wo.
    assert [shape for _, shape in products[:4]] == [
        (hidden, 3 * hidden),
        (hidden, hidden),
        (hidden, 2 * intermediate),
        (intermediate, hidden),
    ]
    kept = quantize.kept_float(graph, MODERNBERT.kept_float)
    assert kept == [products[4 * 0 + 3][0], products[4 * 2 + 2][0]]


@pytest.mark.parametrize(
    ("folder", "change", "refusal"),
    [
        ("modernbert-cls", {"hidden_activation": "silu"}, "hidden_activation 'silu'"),
        ("modernbert-cls", {"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
        (
            "modernbert-cls",
            {"layer_types": ["full_attention", "chunked_attention"] * 2},
            "layer_types",
        ),
        (
            "modernbert-cls",
            {"rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0}}},
            "rope_type 'default'",
        ),
        ("modernbert-rerank", {"classifier_pooling": "max"}, "classifier_pooling 'max'"),
        ("modernbert-rerank", {"classifier_activation": "silu"}, "classifier_activation 'silu'"),
    ],
)
def test_a_config_it_cannot_serve_is_refused_naming_the_file(
    tmp_path: Path, folder: str, change: dict[str, Any], refusal: str
) -> None:
    root = copy_with(tmp_path, folder, change)
    with pytest.raises(ModelFilesError) as refused:
        runtime.load(str(root), runtime="numpy")
    message = str(refused.value)
    assert str(root / "config.json") in message
    assert refusal in message and "supported" in message


def test_a_mean_pooling_head_reads_the_masked_mean_on_both_runtimes(tmp_path: Path) -> None:
    """``classifier_pooling`` "mean" (no reference folder has it): numpy and
    the graph agree, and the scores are not the CLS head's. (A cache of its
    own: a graph is cached by the weights' sha256, which the edited
    config.json does not change.)"""
    onnx_cache = tmp_path / "cache"
    pytest.importorskip("onnxruntime")
    ref = REFERENCE["modernbert-rerank"]
    root = copy_with(tmp_path, "modernbert-rerank", {"classifier_pooling": "mean"})
    query = ids_of(root, ref["pairs"][0][0])
    docs = [ids_of(root, d) for q, d in ref["pairs"][:2]]  # one query, two lengths: padding
    scores = [
        runtime.load(str(root), runtime=name, cache_dir=str(onnx_cache)).rerank(query, docs)
        for name in runtime.RUNTIMES
    ]
    assert np.abs(scores[0] - scores[1]).max() <= 1e-5
    assert np.abs(scores[0] - ref["raw_scores"][:2]).min() > 1e-3


def ids_of(root: Path, text: str) -> list[int]:
    from synapse_models.tokenizer import load_tokenizer

    encoding: Any = load_tokenizer(root / "tokenizer.json").encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
    return list(encoding.ids)
