"""The generated MiniLM programs, checked by the numpy MIL interpreter.

Reference vectors come from sentence-transformers (torch, float32); the
interpreted programs must reach cosine >= 0.999 in fp16 and >= 0.99999 in
fp32 for every bucket. Weights are loaded once per test process.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from synapse_ane_direct.mil import blob
from synapse_ane_direct.mil.generator import generate, weight_file
from synapse_ane_direct.mil.interpreter import Interpreter, InterpreterError
from synapse_ane_direct.mil.parser import MilSyntaxError, parse
from synapse_ane_direct.mil.program import WEIGHTS_PATH, DType
from synapse_ane_direct.model_files import MINILM_CONFIG, MiniLM
from synapse_ane_direct.programs import program_inputs

from .conftest import DATA, TINY, Reference

BUCKETS = (32, 64, 128, 256)
FLOOR: dict[DType, float] = {"fp16": 0.999, "fp32": 0.99999}
#: Short texts every bucket runs (mostly padding in the large buckets: the
#: mask must make their vectors independent of the bucket).
PADDED = ("hello world", "東京は", "Emoji test")


def _padded(text: str) -> bool:
    return text == "a" or text.startswith(PADDED)


def _interpreter(model: MiniLM, bucket: int, dtype: DType) -> Interpreter:
    program = generate(bucket, dtype, model.config)
    return Interpreter(program.text, {WEIGHTS_PATH: weight_file(program, model.weights)})


def _vector(model: MiniLM, interp: Interpreter, ids: list[int], bucket: int, dtype: DType) -> Any:
    (out,) = interp.run(program_inputs(model, ids, bucket, dtype)).values()
    return out.reshape(-1).astype(np.float64)


def test_golden_program_is_stable() -> None:
    text = generate(32, "fp16", MINILM_CONFIG).text
    assert text == (DATA / "minilm-b32-fp16.mil").read_text("utf-8")
    assert generate(32, "fp16", MINILM_CONFIG).text == text  # deterministic


@pytest.mark.parametrize("bucket", BUCKETS)
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_generated_program_declares_layout_and_names_weights(bucket: int, dtype: DType) -> None:
    program = generate(bucket, dtype, MINILM_CONFIG)
    function = parse(program.text)
    assert [(str(t), n) for t, n in function.inputs] == [
        (f"tensor<{dtype}, [1, 384, 1, {bucket}]>", "x"),
        (f"tensor<{dtype}, [1, 1, 1, {bucket}]>", "mask"),
    ]
    assert function.outputs == ("embedding",)
    assert function.target == "ios17"
    offsets = [w.offset for w in program.weights]
    assert offsets == sorted(set(offsets)) and all(o % blob.ALIGN == 0 for o in offsets)
    # every linear layer is a 1x1 conv and every head is split out
    ops = [st.op for st in function.body]
    assert ops.count("conv") == 6 * MINILM_CONFIG.layers
    assert ops.count("split") == 3 * MINILM_CONFIG.layers
    assert ops.count("matmul") == 2 * MINILM_CONFIG.heads * MINILM_CONFIG.layers
    assert "BLOBFILE" in program.text and "tensor<fp32" not in program.text.replace(dtype, "")


@pytest.mark.parametrize("bucket", BUCKETS)
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_interpreted_program_matches_reference_vectors(
    reference: Reference, bucket: int, dtype: DType
) -> None:
    interp = _interpreter(reference.model, bucket, dtype)
    smaller = max((b for b in BUCKETS if b < bucket), default=0)
    chosen = [
        i
        for i, (text, ids) in enumerate(zip(reference.texts, reference.ids, strict=True))
        if smaller < len(ids) <= bucket or _padded(text)
    ]
    assert len(chosen) > len(PADDED)
    for i in chosen:
        got = _vector(reference.model, interp, reference.ids[i], bucket, dtype)
        want = reference.vectors[i]
        cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert cosine >= FLOOR[dtype], f"{reference.texts[i][:40]!r} in bucket {bucket}: {cosine}"
        assert abs(np.linalg.norm(got) - 1.0) < 2e-3  # normalised inside the program


# -- the interpreter refuses what it cannot check -----------------------------


def _tiny(model: MiniLM, dtype: DType = "fp32", bucket: int = 8) -> tuple[str, bytes]:
    program = generate(bucket, dtype, model.config)
    return program.text, weight_file(program, model.weights)


def test_tiny_program_runs_and_padding_does_not_change_the_vector(tiny_model: MiniLM) -> None:
    vectors = []
    for bucket in (4, 8, 16):
        text, weights = _tiny(tiny_model, "fp32", bucket)
        interp = Interpreter(text, {WEIGHTS_PATH: weights})
        vectors.append(_vector(tiny_model, interp, [3, 5, 7], bucket, "fp32"))
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)
    assert np.allclose(vectors[0], vectors[2], atol=1e-6)
    assert np.isclose(np.linalg.norm(vectors[0]), 1.0)


def test_unknown_operation_fails_the_load(tiny_model: MiniLM) -> None:
    text, weights = _tiny(tiny_model)
    broken = text.replace("= softmax(", "= softmax_v2(", 1)
    with pytest.raises(InterpreterError, match="unknown operation 'softmax_v2'"):
        Interpreter(broken, {WEIGHTS_PATH: weights})


def test_unknown_argument_fails_the_load(tiny_model: MiniLM) -> None:
    text, weights = _tiny(tiny_model)
    broken = text.replace("softmax(axis = axis_last,", "softmax(axis = axis_last, beta = one,", 1)
    with pytest.raises(InterpreterError, match="unknown \\['beta'\\]"):
        Interpreter(broken, {WEIGHTS_PATH: weights})


def test_declared_shape_mismatch_fails_the_run(tiny_model: MiniLM) -> None:
    text, weights = _tiny(tiny_model, bucket=8)
    broken = text.replace(
        "tensor<fp32, [1, 1, 8]> mask_bias =", "tensor<fp32, [1, 1, 9]> mask_bias ="
    )
    assert broken != text
    interp = Interpreter(broken, {WEIGHTS_PATH: weights})
    with pytest.raises(InterpreterError, match="mask_bias is declared tensor<fp32, \\[1, 1, 9\\]>"):
        interp.run(program_inputs(tiny_model, [3], 8, "fp32"))


def test_wrong_weight_shape_fails_the_load(tiny_model: MiniLM) -> None:
    text, weights = _tiny(tiny_model)
    broken = text.replace("tensor<fp32, [8, 8, 1, 1]> l0_q_w", "tensor<fp32, [8, 4, 1, 1]> l0_q_w")
    broken = broken.replace(
        "val = tensor<fp32, [8, 8, 1, 1]>(BLOBFILE", "val = tensor<fp32, [8, 4, 1, 1]>(BLOBFILE", 1
    )
    with pytest.raises(InterpreterError, match="bytes stored"):
        Interpreter(broken, {WEIGHTS_PATH: weights})


def test_fp16_program_with_fp32_weights_fails_the_load(tiny_model: MiniLM) -> None:
    text16, _ = _tiny(tiny_model, "fp16")
    _, weights32 = _tiny(tiny_model, "fp32")
    with pytest.raises(InterpreterError, match="data type 2, program says fp16"):
        Interpreter(text16, {WEIGHTS_PATH: weights32})


def test_inputs_must_match_their_declaration(tiny_model: MiniLM) -> None:
    text, weights = _tiny(tiny_model, "fp16")
    interp = Interpreter(text, {WEIGHTS_PATH: weights})
    inputs = program_inputs(tiny_model, [3, 4], 8, "fp32")  # fp32 arrays for an fp16 program
    with pytest.raises(InterpreterError, match="x is declared tensor<fp16"):
        interp.run(inputs)
    with pytest.raises(InterpreterError, match="inputs are"):
        interp.run({"x": inputs["x"]})


SQUARE = """program(1.3)
{
    func main<ios17>(tensor<fp16, [1, 2]> x) {
        tensor<fp16, [1, 2]> y = mul(x = x, y = x)[name = string("y")];
    } -> (y);
}
"""


def test_fp16_overflow_is_reported() -> None:
    interp = Interpreter(SQUARE, {})
    ok = interp.run({"x": np.array([[2, 3]], np.float16)})["y"]
    assert ok.tolist() == [[4, 9]] and ok.dtype == np.float16
    with pytest.raises(InterpreterError, match="MIL line 4: y has non-finite values in fp16"):
        interp.run({"x": np.array([[2, 300]], np.float16)})  # 90000 > fp16's 65504


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t.replace("program(1.3)", "programme(1.3)"),
        lambda t: t.replace("} -> (embedding);", "} -> (embedding)"),
        lambda t: t.replace('[name = string("emb_sum")]', '[name = string("other")]'),
        lambda t: t.replace("tensor<int32, [2]>([1, 1])", "tensor<int32, [2]>([1])", 1),
    ],
)
def test_malformed_text_is_a_syntax_error(tiny_model: MiniLM, mutate: Any) -> None:
    text, _ = _tiny(tiny_model)
    with pytest.raises(MilSyntaxError):
        parse(mutate(text))


def test_weights_outside_the_model_are_named(tiny_model: MiniLM) -> None:
    program = generate(8, "fp32", TINY)
    tensors = dict(tiny_model.weights)
    del tensors["encoder.layer.0.output.dense.bias"]
    with pytest.raises(
        ValueError, match=re.escape("no tensor 'encoder.layer.0.output.dense.bias'")
    ):
        weight_file(program, tensors)


def test_bucket_beyond_the_positions_is_refused() -> None:
    with pytest.raises(ValueError, match=r"within 1\.\.512"):
        generate(513, "fp16", MINILM_CONFIG)


def test_host_ids_through_the_simulated_device_give_the_reference_vector(
    reference: Reference,
) -> None:
    from synapse_ane_direct.model_files import ModelTokenizer
    from synapse_ane_direct.programs import simulated_program_device
    from synapse_ane_direct.transport import SHIPPED_MODELS, AneDirectTransport
    from synapse_core.plugin import Shape

    tokenizer = AneDirectTransport().tokenizer(SHIPPED_MODELS[0])
    assert isinstance(tokenizer, ModelTokenizer)
    host_ids = [tokenizer.encode(text) for text in reference.texts]
    # the host counts what the program sees: [CLS] ids [SEP]
    assert [tokenizer.sequence_length(ids) for ids in host_ids] == [len(x) for x in reference.ids]
    device = simulated_program_device(reference.model, 384)
    device.compile(Shape(32, 2))
    rows = device.run(Shape(32, 2), "embed", host_ids[:2], None)
    for row, want in zip(rows, reference.vectors[:2], strict=True):
        assert float(np.dot(row, want)) >= FLOOR["fp16"]
