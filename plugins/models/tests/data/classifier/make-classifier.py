"""Make two tiny randomly initialised BERT classifiers in the Hugging Face
``BertForSequenceClassification`` layout: ``bert-classify`` (four exclusive
labels, ``single_label_classification``) and ``bert-multilabel`` (three
independent labels, ``multi_label_classification``). No outputs are written:
transformers is not installed here, so the tests compare against a float64
re-implementation of BERT of their own.

Both take the body's sizes and the tokenizer of ``../tiny-models/bert-rerank``
(copied beside the weights). Usage: ``python make-classifier.py [SEED]``
(numpy and safetensors only; seed 40 made the committed folders).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "tiny-models" / "bert-rerank"
HIDDEN, INTERMEDIATE, LAYERS, VOCAB, POSITIONS, HEADS = 64, 128, 3, 427, 130, 4
FOLDERS = {
    "bert-classify": (
        ("entailment", "neutral", "contradiction", "off-topic"),
        "single_label_classification",
    ),
    "bert-multilabel": (("toxic", "spam", "question"), "multi_label_classification"),
}


def weights(rng: np.random.Generator, labels: int) -> dict[str, np.ndarray]:
    def normal(*shape: int, scale: float = 0.08) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(prefix: str) -> dict[str, np.ndarray]:
        return {
            f"{prefix}.weight": (1.0 + normal(HIDDEN, scale=0.1)).astype(np.float32),
            f"{prefix}.bias": normal(HIDDEN, scale=0.05),
        }

    out: dict[str, np.ndarray] = {
        "bert.embeddings.word_embeddings.weight": normal(VOCAB, HIDDEN, scale=0.5),
        "bert.embeddings.position_embeddings.weight": normal(POSITIONS, HIDDEN, scale=0.2),
        "bert.embeddings.token_type_embeddings.weight": normal(2, HIDDEN, scale=0.5),
        **norm("bert.embeddings.LayerNorm"),
    }
    for i in range(LAYERS):
        layer = f"bert.encoder.layer.{i}"
        for name in ("query", "key", "value"):
            out[f"{layer}.attention.self.{name}.weight"] = normal(HIDDEN, HIDDEN, scale=0.2)
            out[f"{layer}.attention.self.{name}.bias"] = normal(HIDDEN)
        out[f"{layer}.attention.output.dense.weight"] = normal(HIDDEN, HIDDEN, scale=0.2)
        out[f"{layer}.attention.output.dense.bias"] = normal(HIDDEN)
        out.update(norm(f"{layer}.attention.output.LayerNorm"))
        out[f"{layer}.intermediate.dense.weight"] = normal(INTERMEDIATE, HIDDEN, scale=0.2)
        out[f"{layer}.intermediate.dense.bias"] = normal(INTERMEDIATE)
        out[f"{layer}.output.dense.weight"] = normal(HIDDEN, INTERMEDIATE, scale=0.2)
        out[f"{layer}.output.dense.bias"] = normal(HIDDEN)
        out.update(norm(f"{layer}.output.LayerNorm"))
    out["bert.pooler.dense.weight"] = normal(HIDDEN, HIDDEN, scale=0.3)
    out["bert.pooler.dense.bias"] = normal(HIDDEN)
    # Logits of about one: probabilities that differ, none saturated.
    out["classifier.weight"] = normal(labels, HIDDEN, scale=0.25)
    out["classifier.bias"] = normal(labels, scale=0.2)
    return out


def config(labels: tuple[str, ...], problem: str) -> dict[str, object]:
    return {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "attention_probs_dropout_prob": 0.0,
        "classifier_dropout": None,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "hidden_size": HIDDEN,
        "id2label": {str(i): label for i, label in enumerate(labels)},
        "label2id": {label: i for i, label in enumerate(labels)},
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": POSITIONS,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "pad_token_id": 0,
        "problem_type": problem,
        "type_vocab_size": 2,
        "vocab_size": VOCAB,
    }


def main(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for name, (labels, problem) in FOLDERS.items():
        folder = HERE / name
        folder.mkdir(exist_ok=True)
        save_file(weights(rng, len(labels)), str(folder / "model.safetensors"))
        text = json.dumps(config(labels, problem), indent=2, sort_keys=True) + "\n"
        (folder / "config.json").write_text(text, encoding="utf-8")
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(SOURCE / file, folder / file)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
