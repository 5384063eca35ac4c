"""A random-weight model at the real Qwen3-Embedding-0.6B shapes on the CPU lane.

No download: the folder is built from the real config's sizes (hidden 1024,
28 layers, 16 query heads, 8 key/value heads of 128, intermediate 3072, an
embedding table of 151,669 rows) with seeded random weights, and the
tokenizer of the project's tiny Qwen3 folder (a few hundred tokens: its ids
only reach the first rows of the full-size table, which Qwen3's padded
vocabulary allows). Built once under the benchmark cache
(``~/.cache/synapse/bench-models``), keyed by its shape.

The layer count can be lowered (``SYNAPSE_BENCH_QWEN3_LAYERS``) where
building and quantizing the 2.4 GB float32 model would take too long; the
figures name the layers they ran.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import attrs
import numpy as np

from synapse_core.deadline import Deadline
from synapse_core.opening import open_host
from synapse_core.testing import host_config, model_entry

from .harness import Figure, Series

#: Qwen3-Embedding-0.6B's config.json sizes
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, VOCAB = (
    1024,
    28,
    16,
    8,
    128,
    3072,
    151669,
)
#: the served ceiling of the benchmark folder (the real model's is 32,768)
CEILING = 512
SEED = 6
DEADLINE_S = 1800.0
SHORT = "What is the capital of France?"
LAYERS_ENV = "SYNAPSE_BENCH_QWEN3_LAYERS"


@attrs.frozen
class Plan:
    """How much of the Qwen3-shaped model each mode measures."""

    repetitions: int
    #: texts of the bulk call (the cpu group's mixed lengths)
    bulk_texts: int
    #: calls of the single-text p50, per repetition
    single_samples: int
    layers: int = LAYERS


PLANS = {
    "smoke": Plan(1, 4, 3, layers=2),
    "quick": Plan(2, 16, 10),
    "full": Plan(3, 64, 30),
}


def plan_of(mode: str) -> Plan:
    """The mode's plan, its layer count overridden by ``SYNAPSE_BENCH_QWEN3_LAYERS``."""
    plan = PLANS[mode]
    layers = os.environ.get(LAYERS_ENV)
    return attrs.evolve(plan, layers=int(layers)) if layers else plan


def tiny_folder() -> Path:
    """The project's tiny Qwen3 embedder, whose tokenizer and modules are reused."""
    root = Path(__file__).resolve().parent.parent
    return root / "plugins" / "models" / "tests" / "data" / "tiny-models-2" / "qwen3-last"


def bench_root() -> Path:
    from synapse_models.onnx_file import default_cache_dir

    return default_cache_dir().parent / "bench-models"


def build_folder(layers: int, root: Path | None = None) -> Path:
    """The Qwen3-0.6B-shaped folder of ``layers`` layers, built once (seeded)."""
    target = (root or bench_root()) / f"qwen3-0.6b-shapes-l{layers}-s{SEED}"
    if (target / "model.safetensors").is_file():
        return target
    from safetensors.numpy import save_file

    source = tiny_folder()
    aside = target.with_name(f".{target.name}.partial")
    shutil.rmtree(aside, ignore_errors=True)
    shutil.copytree(source, aside, ignore=shutil.ignore_patterns("model.safetensors"))
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config.update(
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        max_window_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        intermediate_size=INTERMEDIATE,
        vocab_size=VOCAB,
        max_position_embeddings=32768,
    )
    (aside / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (aside / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": CEILING, "do_lower_case": False}), encoding="utf-8"
    )
    pooling = json.loads((aside / "1_Pooling" / "config.json").read_text(encoding="utf-8"))
    pooling["word_embedding_dimension"] = HIDDEN
    (aside / "1_Pooling" / "config.json").write_text(json.dumps(pooling), encoding="utf-8")
    save_file(_weights(layers), str(aside / "model.safetensors"))
    os.replace(aside, target)
    return target


def _weights(layers: int) -> dict[str, Any]:
    """Seeded random weights in the hub's names, scaled so activations stay finite."""
    rng = np.random.default_rng(SEED)

    def matrix(rows: int, cols: int) -> Any:
        out = rng.standard_normal((rows, cols), dtype=np.float32)
        out *= np.float32(1 / np.sqrt(cols))
        return out

    def ones(size: int) -> Any:
        return np.ones(size, dtype=np.float32)

    tensors = {"embed_tokens.weight": matrix(VOCAB, HIDDEN), "norm.weight": ones(HIDDEN)}
    for n in range(layers):
        p = f"layers.{n}."
        tensors.update(
            {
                f"{p}input_layernorm.weight": ones(HIDDEN),
                f"{p}post_attention_layernorm.weight": ones(HIDDEN),
                f"{p}self_attn.q_proj.weight": matrix(HEADS * HEAD_DIM, HIDDEN),
                f"{p}self_attn.k_proj.weight": matrix(KV_HEADS * HEAD_DIM, HIDDEN),
                f"{p}self_attn.v_proj.weight": matrix(KV_HEADS * HEAD_DIM, HIDDEN),
                f"{p}self_attn.o_proj.weight": matrix(HIDDEN, HEADS * HEAD_DIM),
                f"{p}self_attn.q_norm.weight": ones(HEAD_DIM),
                f"{p}self_attn.k_norm.weight": ones(HEAD_DIM),
                f"{p}mlp.gate_proj.weight": matrix(INTERMEDIATE, HIDDEN),
                f"{p}mlp.up_proj.weight": matrix(INTERMEDIATE, HIDDEN),
                f"{p}mlp.down_proj.weight": matrix(HIDDEN, INTERMEDIATE),
            }
        )
    return tensors


def prepare(folder: Path) -> float:
    """Builds and caches the float32 graph, its pre-packed copy and the int8
    graph (so that no timed call pays for them); the int8 graph's worst cosine."""
    from synapse_models import model as runtime

    quantize: runtime.Quantize | None
    for quantize in (None, "int8"):
        model = runtime.load(str(folder), quantize=quantize, threads=1)
        model.embed([model.tokenizer.encode(SHORT)])  # builds the pre-packed file
        if quantize:
            assert model.min_cosine is not None
            return model.min_cosine
        del model
    raise AssertionError("unreachable")


def measure(mode: str, texts: list[str], memory_mib: Any) -> list[Figure]:
    """The Qwen3-shaped figures; ``texts``: the bulk texts to draw from;
    ``memory_mib``: a pid's (VmRSS, VmHWM) in MiB."""
    plan = plan_of(mode)
    start = time.perf_counter()
    folder = build_folder(plan.layers)
    min_cosine = prepare(folder)
    build_s = time.perf_counter() - start
    series = anyio.run(_measure, folder, plan, texts[: plan.bulk_texts], memory_mib)
    shape = (
        f"random weights at Qwen3-Embedding-0.6B's shapes, {plan.layers} of its 28 layers, "
        f"full {VOCAB}-row embedding table (the tokenizer's ids reach only its first rows)"
    )
    return [
        Figure(
            "cpu_qwen3_06b_fp32_texts_per_s",
            "texts/s",
            f"texts per second of a {plan.bulk_texts}-text mixed-length call through the host, "
            f"float32, every core; {shape}",
            series["fp32_texts_per_s"],
        ),
        Figure(
            "cpu_qwen3_06b_int8_texts_per_s",
            "texts/s",
            f'the same call with quantize = "int8"; {shape}',
            series["int8_texts_per_s"],
            None,
            {"int8_min_cosine": min_cosine},
        ),
        Figure(
            "cpu_qwen3_06b_single_p50_ms",
            "ms",
            f"p50 of host.embed of one short text, float32 (detail: int8); {shape}",
            series["fp32_single_ms"],
            None,
            series.medians("int8_single_ms"),
        ),
        Figure(
            "cpu_qwen3_06b_worker_rss_mib",
            "MiB",
            "resident memory of the float32 worker after the bulk and single calls "
            f"(detail: its peak, and the int8 worker's); {shape}",
            series["fp32_rss_mib"],
            None,
            {
                **series.medians("fp32_hwm_mib", "int8_rss_mib"),
                "build_and_prepare_s": build_s,
            },
        ),
    ]


async def _measure(folder: Path, plan: Plan, texts: list[str], memory_mib: Any) -> Series:
    import synapse_cpu.plugin

    entry = functools.partial(
        model_entry,
        transport="cpu",
        package="qwen3-0.6b-shapes",
        ceiling=CEILING,
        model_dir=str(folder),
    )
    config = host_config(
        entry("fp32"),
        entry("int8", quantize="int8"),
        exchange_timeout_s=DEADLINE_S,
    )
    series = Series()
    async with open_host(config, plugins=[synapse_cpu.plugin]) as host:
        for name in ("fp32", "int8"):
            await host.embed(name, [SHORT], deadline=Deadline.after(DEADLINE_S))
        for rep in range(plan.repetitions):
            for name in ("fp32", "int8") if rep % 2 == 0 else ("int8", "fp32"):
                start = time.perf_counter()
                # the full run's mixed texts reach past the served ceiling (512):
                # cut at their end, as a client asking for truncation would be
                await host.embed(name, texts, deadline=Deadline.after(DEADLINE_S), truncate=True)
                series.add(**{f"{name}_texts_per_s": len(texts) / (time.perf_counter() - start)})
                times = []
                for _ in range(plan.single_samples):
                    start = time.perf_counter()
                    await host.embed(name, [SHORT], deadline=Deadline.after(DEADLINE_S))
                    times.append(time.perf_counter() - start)
                series.add(**{f"{name}_single_ms": float(np.median(times)) * 1e3})
                worker = host.worker(name)
                assert worker is not None and worker.process is not None
                rss, hwm = memory_mib(worker.process.pid)
                series.add(**{f"{name}_rss_mib": rss, f"{name}_hwm_mib": hwm})
    return series
