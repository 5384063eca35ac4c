"""Memory and size: a worker's sessions share one copy of the weights, graphs
past protobuf's 2 GB keep their weights in a data file, and int8 works for
every family (with its loss reported)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from synapse_models import folder, onnx_file, quantize, sessions
from synapse_models import model as runtime
from synapse_models.families import FAMILIES
from synapse_models.testing import DATA

#: (reference set, folder) of every tiny embedder and cross-encoder
FOLDERS = [
    (reference_set, name)
    for reference_set in ("tiny-models", "tiny-models-2")
    for name, entry in json.loads((DATA / reference_set / "reference.json").read_text())[
        "models"
    ].items()
    if entry["kind"] in ("embed", "rerank")
]


#: families without a tiny reference folder, and the test of their int8
NO_REFERENCE = {"gte": "test_family_gte.py::test_int8_serves_gte_and_reports_its_loss"}


def test_the_tiny_folders_cover_every_family() -> None:
    """So that the int8 test below reaches every family (GTE's int8 is
    checked on the folder its own test builds: it has no reference here)."""
    covered = {folder.read_layout(DATA / s / n).family.name for s, n in FOLDERS}
    assert covered | set(NO_REFERENCE) == {family.name for family in FAMILIES.values()}
    assert not covered & set(NO_REFERENCE)


@pytest.mark.parametrize(("reference_set", "name"), FOLDERS)
def test_int8_loads_for_every_family_and_reports_its_loss(
    reference_set: str, name: str, onnx_cache: Path
) -> None:
    pytest.importorskip("onnxruntime")
    root = str(DATA / reference_set / name)
    fp32 = runtime.load(root, runtime="onnxruntime", cache_dir=str(onnx_cache))
    int8 = runtime.load(root, runtime="onnxruntime", quantize="int8", cache_dir=str(onnx_cache))
    assert int8.identity.endswith(":onnxruntime-int8") and int8.graph != fp32.graph
    sequences = [int8.tokenizer.encode(t) for t in ("a short text", "another, longer text here")]
    if int8.layout.cross_encoder:
        assert int8.min_cosine is None
        assert int8.max_score_delta is not None and 0 <= int8.max_score_delta < 1.0
        got = int8.rerank(sequences[0], sequences[1:])
        want = fp32.rerank(sequences[0], sequences[1:])
        assert np.abs(got - want).max() < 1.0
    else:
        assert int8.max_score_delta is None
        assert int8.min_cosine is not None and 0.9 < int8.min_cosine <= 1.0 + 1e-6
        got, want = int8.embed(sequences), fp32.embed(sequences)
        assert (
            np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        ).min() > 0.9


def test_a_graph_past_the_limit_keeps_its_weights_beside_it_and_quantizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past :data:`onnx_file.EXTERNAL_BYTES` (protobuf's 2 GB for a real
    model, lowered here) the weights are written to a data file, renamed
    into place before the graph naming it; onnxruntime runs it, int8 builds
    from it, and the vectors equal those of the one-file graph."""
    pytest.importorskip("onnxruntime")
    root = str(DATA / "tiny-models-2" / "qwen3-last")
    small = runtime.load(root, runtime="onnxruntime", cache_dir=str(tmp_path / "one-file"))
    assert small.graph is not None and not quantize.external(small.graph)
    monkeypatch.setattr(onnx_file, "EXTERNAL_BYTES", 0)
    big = runtime.load(root, runtime="onnxruntime", cache_dir=str(tmp_path / "external"))
    assert big.graph is not None and big.graph.name == small.graph.name
    data = big.graph.with_name(f"{big.graph.name}.data")
    assert quantize.external(big.graph) and data.stat().st_size > big.graph.stat().st_size
    sequences = [big.tokenizer.encode(t) for t in ("one text", "and a second one")]
    assert np.abs(big.embed(sequences) - small.embed(sequences)).max() <= 1e-6
    int8 = runtime.load(
        root, runtime="onnxruntime", quantize="int8", cache_dir=str(tmp_path / "external")
    )
    assert int8.graph is not None and quantize.external(int8.graph)
    assert int8.min_cosine is not None and int8.min_cosine > 0.9
    int8.embed(sequences)
    leftovers = [p.name for p in big.graph.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []  # the folders written aside are gone


def test_sessions_of_every_thread_count_are_made_of_one_packed_file(onnx_cache: Path) -> None:
    """Structurally: each thread count's session maps the same pre-packed
    file (built once), not a graph it packs again on its own heap."""
    pytest.importorskip("onnxruntime")
    model = runtime.load(
        str(DATA / "tiny-models" / "bert-cls"), runtime="onnxruntime", cache_dir=str(onnx_cache)
    )
    forward = model.run.__self__  # type: ignore[attr-defined]
    assert isinstance(forward, runtime.OnnxSessions) and model.graph is not None
    one, two = forward.session(1), forward.session(2)
    assert one is not two and forward.shared == sessions.packed_path(model.graph)
    assert forward.shared.with_name(f"{forward.shared.name}.data").is_file()


#: the worker-like process of the test below: MiniLM at 1, then 2 threads;
#: prints the proportional set size (MiB) after each and the weights' MiB
_PSS_SCRIPT = textwrap.dedent(
    """
    import sys
    from synapse_models import model as runtime

    def pss():
        with open("/proc/self/smaps_rollup") as status:
            line = next(l for l in status if l.startswith("Pss:"))
        return int(line.split()[1]) / 1024

    m = runtime.load(cache_dir=sys.argv[1], threads=1)
    texts = [m.tokenizer.encode("What is the capital of France? " * 8)] * 8
    m.embed(texts)
    one = pss()
    m.threads = 2
    m.embed(texts)
    print(one, pss(), m.files.weights.stat().st_size / 2**20)
    """
)


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")
def test_a_second_thread_count_does_not_hold_the_weights_again(
    model_dir: Path, tmp_path: Path
) -> None:
    """Measured in a fresh process: the memory a worker's second thread count
    adds (proportional set size, which counts a page mapped twice once) is a
    small part of the weights, where a session packing its own copy added
    about the weights' size (111 MiB for MiniLM's 87 MiB)."""
    pytest.importorskip("onnxruntime")
    out = subprocess.run(
        [sys.executable, "-c", _PSS_SCRIPT, str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    one, two, weights = map(float, out.split())
    assert two - one < 0.25 * weights, (one, two, weights)
