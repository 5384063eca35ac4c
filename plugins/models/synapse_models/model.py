"""A loaded model: checked files, tokenizer ids, and a forward pass on one runtime.

Independent of any lane's worker protocol, so workers of every lane,
benchmarks and tests call the very same forward pass. Runtimes:
``onnxruntime`` (its graph is built from the same weights, optionally
quantized to int8, and run on the execution providers the lane gives) and
``numpy`` (the reference, and the fallback where onnxruntime cannot be
imported).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import numpy as np

from . import files, packing
from .arranged import Weights
from .errors import ModelFilesError
from .folder import Layout, read_json
from .heads import Classifier, Dense, Embedding, Ending, finish
from .outputs import Raw, RawName, TokenOutputs, numpy_raw, special_ids, token_heads
from .sessions import CPU, Provider, onnx_session, packed_graph, usable_cores
from .tokenizer import HFTokenizer, check_fits, tokenizer_of
from .weights import F32, I64, LazyTensors, Tensors

Runtime = Literal["numpy", "onnxruntime"]
RUNTIMES: tuple[Runtime, ...] = ("numpy", "onnxruntime")
Quantize = Literal["int8"]
#: the graph's floats: float32, or float16 (onnxruntime only; for GPUs)
Precision = Literal["fp32", "fp16"]
#: (ids, token types, mask, threads) -> vectors (rows, dims), or a cross-encoder's logits (rows,)
Forward = Callable[[I64, I64, F32, int], F32]
Vectors = F32
#: a forward slice pads its rows to at most this times its shortest row
SLACK = 1.25
log = logging.getLogger(__name__)


class ThreadShare(Protocol):
    """How many threads each request runs on, when a lane shares its cores
    among its busy workers (the CPU lane's ``CoreShare``)."""

    def enter(self, positions: int) -> int:
        """A request of ``positions`` starts: the threads it may use."""
        ...

    def leave(self) -> None:
        """The request that entered last has finished."""
        ...


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
    """A model ready to compute: embed token-id sequences, or score pairs."""

    files: files.ModelFiles
    sha256: str
    layout: Layout
    tokenizer: HFTokenizer
    runtime: Runtime
    run: Forward
    #: rows x padded width per forward call stays within this many positions
    batch_tokens: int = 2048
    #: ``"int8"``: the forward pass runs a dynamically quantized graph
    quantize: Quantize | None = None
    #: the int8 graph's worst cosine to float32 on a fixed text set (an embedder's)
    min_cosine: float | None = None
    #: a fixed thread count, or ``None``: a share of the cores, from ``share``
    threads: int | None = None
    share: ThreadShare | None = None
    #: the ONNX graph file the forward pass runs (``None`` on numpy)
    graph: Path | None = None
    #: the lane's name, the identity's first part
    lane: str = "cpu"
    #: a cross-encoder's int8 graph: its worst score difference to float32
    max_score_delta: float | None = None
    #: float32, or float16 (the graph converted: see ``onnx_file.FP32_OPS``)
    precision: Precision = "fp32"
    #: what the identity adds after the runtime: where and in what floats
    #: the graph runs (a GPU lane's ``"-cuda-fp16"``); empty on the CPU
    engine: str = ""
    #: what computes the sparse and token outputs from the runtime's one pass
    #: (:meth:`outputs`); ``None``: the model has none (a cross-encoder)
    tokens: TokenOutputs | None = None
    _current: int = attrs.field(init=False, default=0)

    def outputs(self, sequences: Sequence[Sequence[int]], kinds: Sequence[Any]) -> list[list[Any]]:
        """Each of ``kinds`` (``dense``, ``sparse``, ``multi``) per sequence, in
        order, all from one pass of the body per slice (:mod:`.outputs`): one
        run of the onnxruntime graph, whose extra outputs are the token
        heads, or numpy on the forward pass's own weights."""
        from .outputs import run_outputs

        if self.tokens is None:
            raise ValueError(f"{self.files.name} has no sparse or token outputs")
        framing = self.framing
        widths = [len(s) + framing.single for s in sequences]
        self._enter(max(widths, default=0) * len(widths))
        try:
            threads = self._current or self.threads or usable_cores()
            return run_outputs(
                self.tokens, sequences, framing, self._slices(widths), threads, kinds
            )
        finally:
            self._leave()

    def forward(self, ids: I64, types: I64, mask: F32) -> F32:
        """A packed batch's rows, on the current request's threads."""
        return self.run(ids, types, mask, self._current or self.threads or usable_cores())

    def _enter(self, positions: int) -> None:
        """A request of ``positions`` (rows x widths) starts: its thread count
        is fixed, all cores, or the share of them this worker gets while the
        lane's other busy workers compute (``CoreShare.enter``). Every
        :meth:`_enter` is followed by a :meth:`_leave`."""
        if self.threads is not None or self.share is None:
            self._current = self.threads or usable_cores()
        else:
            self._current = self.share.enter(positions)

    def _leave(self) -> None:
        if self.threads is None and self.share is not None:
            self._current = 0
            self.share.leave()

    @property
    def dims(self) -> int:
        """A row's width: the vector's, a classifier's labels, or one score."""
        layout = self.layout
        return 1 if layout.cross_encoder and not layout.classifier else layout.dims

    @property
    def int8_key(self) -> str:
        """The name the int8 graph's measured loss is kept under (:func:`files.int8_key`)."""
        return files.int8_key(self.files, self.layout, self.sha256)

    @property
    def framing(self) -> packing.Framing:
        return self.tokenizer.framing()

    @property
    def identity(self) -> str:
        """Names the vector space (or the scores): model, architecture and
        pooling, weights, runtime and any lossy conversion (``-int8``); two
        folders never share one."""
        conversion = f"-{self.quantize}" if self.quantize else ""
        kind, runtime = self.layout.kind, f"{self.runtime}{self.engine}"
        return f"{self.lane}:{self.files.name}:{kind}:{self.sha256[:8]}:{runtime}{conversion}"

    def providers_in_use(self) -> list[str]:
        """The execution providers onnxruntime runs the graph on, as its
        session reports them: a provider that failed to load (a GPU's
        libraries missing) is left out there, where onnxruntime only logs it.
        Empty on numpy."""
        sessions = getattr(self.run, "__self__", None)
        if not isinstance(sessions, OnnxSessions):
            return []
        providers: list[str] = sessions.session(self.threads or 1).get_providers()
        return providers

    def embed(self, sequences: Sequence[Sequence[int]]) -> F32:
        """Vectors, one row per token-id sequence (no special tokens), in order.

        Sequences run shortest first in slices of at most ``batch_tokens``
        positions, each padded only to its own longest and cut where padding
        would pass a quarter of the slice's shortest: the mask makes the
        result independent of this grouping.
        """
        framing = self.framing
        widths = [len(s) + framing.single for s in sequences]
        slices = self._slices(widths)
        self._enter(max(widths, default=0) * len(widths))
        try:
            if len(slices) == 1 and _in_order(slices[0]):
                # Nothing to put back in order: the forward pass's rows are
                # the answer (an indexed copy costs 20 µs of one short text).
                return self.forward(*packing.pack(sequences, framing))
            out = np.empty((len(sequences), self.dims), dtype=np.float32)
            for chunk in slices:
                out[chunk] = self.forward(*packing.pack([sequences[i] for i in chunk], framing))
            return out
        finally:
            self._leave()

    def rerank(self, query: Sequence[int], documents: Sequence[Sequence[int]]) -> F32:
        """One score per document: a cross-encoder's logit for the pair (the
        host turns it into a probability), a ColBERT model's MaxSim of the
        query's token vectors and the document's (:func:`.token_heads.maxsim`),
        or a bi-encoder's cosine of the query's vector and the document's."""
        if self.layout.colbert and not self.layout.cross_encoder:
            from .token_heads import maxsim

            (rows,) = self.outputs([query, *documents], ["multi"])
            return np.array([maxsim(rows[0], row) for row in rows[1:]], dtype=np.float32)
        if self.layout.classifier:
            raise ValueError(f"{self.files.name} is a classifier; it classifies, not reranks")
        if not self.layout.cross_encoder:
            vectors = self.embed([query, *documents])
            scores: F32 = vectors[1:] @ vectors[0]
            return scores
        return self._pairs(query, documents)

    def classify(self, query: Sequence[int] | None, sequences: Sequence[Sequence[int]]) -> F32:
        """A classifier's logits (rows, labels), one row per sequence, in
        order; with ``query``, each row is the pair (``query``, sequence),
        framed as a cross-encoder frames a pair (an NLI model's premise and
        hypothesis)."""
        if not self.layout.classifier:
            raise ValueError(f"{self.files.name} is not a classifier of several labels")
        return self.embed(sequences) if query is None else self._pairs(query, sequences)

    def _pairs(self, query: Sequence[int], documents: Sequence[Sequence[int]]) -> F32:
        """The head's logits of each pair (``query``, document): one per row
        for one label, (rows, labels) for several."""
        framing = self.framing
        shape = (len(documents), self.dims) if self.layout.classifier else (len(documents),)
        out = np.empty(shape, dtype=np.float32)
        widths = [len(query) + len(d) + framing.pair for d in documents]
        self._enter(max(widths, default=0) * len(widths))
        try:
            for chunk in self._slices(widths):
                pairs = packing.pack_pairs(query, [documents[i] for i in chunk], framing)
                out[chunk] = self.forward(*pairs)
        finally:
            self._leave()
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


def _in_order(indexes: Sequence[int]) -> bool:
    """Whether ``indexes`` are 0, 1, 2, ... (a slice of every row, in input order)."""
    return all(index == position for position, index in enumerate(indexes))


def load(
    model_dir: str | None = None,
    sha256: str | None = None,
    runtime: Runtime | None = None,
    *,
    quantize: Quantize | None = None,
    cache_dir: str | None = None,
    batch_tokens: int = 2048,
    threads: int | None = None,
    share: ThreadShare | None = None,
    spinning: bool = True,
    providers: Sequence[Provider] = CPU,
    lane: str = "cpu",
    precision: Precision = "fp32",
    engine: str = "",
    instruction: str | None = None,
) -> Model:
    """Check and load a model folder (default: the MiniLM wheel's) on ``runtime``
    (default: onnxruntime, else numpy), on ``threads`` threads (default: every
    usable core, or ``share``'s share of them); ``spinning``: onnxruntime's
    idle pool threads spin-wait (its default) or sleep; ``providers``: the
    onnxruntime execution providers (the CPU's by default; names, or
    (name, options) pairs); ``lane``: the identity's first part;
    ``precision``: ``"fp16"`` runs the graph converted to float16
    (onnxruntime only, not with ``quantize``; see ``onnx_file.cached_fp16``);
    ``engine``: what the identity adds after the runtime (``"-cuda-fp16"``);
    ``instruction``: an LLM reranker's instruction in place of the model
    card's (:meth:`Layout.with_instruction`; the host's tokenizer must frame
    pairs with the same one).

    Raises :class:`ModelFilesError` naming the file at fault: missing, corrupt
    (sha256 mismatch), an architecture or pooling not supported, or a
    tokenizer that does not fit.
    """
    located = files.locate(model_dir, sha256)
    layout = files.check_present(located).with_instruction(instruction)
    digest = files.verify_weights(located)
    tokenizer = checked_tokenizer(located, layout)
    weights = read_weights(located, layout)
    runtime = resolve(runtime)
    if precision == "fp16" and (runtime != "onnxruntime" or quantize is not None):
        raise ValueError("float16 needs the onnxruntime runtime, without quantize")
    forward: Forward
    raw: Raw
    min_cosine = max_score_delta = None
    graph = None
    if runtime == "onnxruntime":
        from .onnx_file import cached_graph, default_cache_dir, usable_cache_dir

        graphs = graph_cache(Path())
        folders = (str(graphs), "int8") if quantize == "int8" else (str(graphs),)
        root = usable_cache_dir(Path(cache_dir) if cache_dir else default_cache_dir(), *folders)
        key = files.graph_key(located, digest)
        graph = cached_graph(weights, key, root / graphs)
        typed = weights.family.token_types(weights.body)
        kept = weights.family.kept_float
        # The session holds its own copy, the token heads' too: none in numpy.
        del weights
        if quantize == "int8":
            from . import quantize as int8

            most = min(254, layout.positions - tokenizer.framing().single)
            encode = functools.partial(_fixed_sequences, tokenizer, most)
            loss_key = files.int8_key(located, layout, digest)
            graph, loss = int8.cached_int8(graph, encode, root, loss_key, kept)
            min_cosine, max_score_delta = loss.min_cosine, loss.max_score_delta
        if precision == "fp16":
            from .onnx_file import cached_fp16

            graph = cached_fp16(graph)
        sessions = OnnxSessions(graph, typed, spinning, providers)
        forward, raw = sessions.run, sessions.raw
    else:
        if quantize is not None:
            raise ValueError("quantize needs the onnxruntime runtime")
        numpy_forward = NumpyForward(weights)
        forward, raw = numpy_forward.run, numpy_forward.raw
    tokens = None
    if not layout.cross_encoder:
        special = special_ids(located.root) if layout.sparse == "m3" else frozenset()
        tokens = TokenOutputs(layout, raw, special)

    return Model(
        located,
        digest,
        layout,
        tokenizer,
        runtime,
        forward,
        batch_tokens,
        quantize,
        min_cosine,
        threads,
        share,
        graph,
        lane,
        max_score_delta,
        precision,
        engine,
        tokens,
    )


def checked_tokenizer(located: files.ModelFiles, layout: Layout) -> HFTokenizer:
    """The folder's tokenizer, checked against its weights' vocabulary."""
    tokenizer = layout_tokenizer(located.tokenizer, layout)
    family = layout.family
    check_fits(tokenizer, files.vocab_rows(located.weights, layout), family.vocab_padded)
    return tokenizer


def layout_tokenizer(path: Path, layout: Layout) -> HFTokenizer:
    """The tokenizer at ``path`` as the model of ``layout`` frames and encodes
    texts (:func:`~synapse_models.tokenizer.tokenizer_of`)."""
    return tokenizer_of(
        path, layout.cross_encoder, layout.template, layout.causal, layout.strips_texts
    )


def read_weights(located: files.ModelFiles, layout: Layout) -> Weights:
    """The folder's weights arranged for its family, pooling, Dense modules or head."""
    config = read_json(located.config)
    family = layout.family
    source = str(located.weights)
    tensors = Tensors(LazyTensors(located.weights), source, family.name, family.prefixes)
    sizes = family.sizes(config, str(located.config))
    ending: Ending
    if layout.template is not None:
        # Read first: a tied head's rows are in the embedding table the body takes.
        tokenizer = layout_tokenizer(located.tokenizer, layout)
        ending = _yes_no_head(tensors, layout.template, tokenizer)
    body = family.arrange(tensors, config, sizes)
    if layout.template is not None:
        dims = 1
    elif layout.cross_encoder:
        ending = family.classifier(tensors, config)
        dims = layout.dims if layout.classifier else 1
        labels = int(ending.out_w.shape[1])
        if labels != max(1, len(layout.labels)):
            raise ModelFilesError(
                source,
                f"the classifier has {labels} outputs; config.json names "
                f"{max(1, len(layout.labels))} labels",
            )
    else:
        dense = tuple(_dense(located.root / d.folder, d) for d in layout.dense)
        ending = Embedding(layout.pooling, dense, layout.normalize)
        dims = layout.dims
    tokens = None if layout.cross_encoder else token_heads(located, layout)
    return Weights(family, body, ending, dims, layout.graph_end, tokens)


def _yes_no_head(
    tensors: Tensors, template: packing.PairTemplate, tokenizer: HFTokenizer
) -> Classifier:
    """An LLM reranker's score, ``logit(yes) - logit(no)`` at the last real
    position, as a one-label head: the difference of the two rows of its
    language-model head (the final norm is the body's)."""
    ids = [tokenizer.token_id(template.yes), tokenizer.token_id(template.no)]
    yes, no = tensors.rows(template.logits, ids)
    out_w = (yes - no)[:, None]
    return Classifier(None, None, "identity", out_w, np.zeros(1, np.float32), "lasttoken")


def _dense(folder: Path, module: Any) -> Dense:
    path = folder / files.WEIGHTS
    tensors = Tensors(LazyTensors(path), str(path), "sentence-transformers Dense")
    weight = tensors.matrix("linear.weight")
    if weight.shape != (module.in_features, module.out_features):
        raise ModelFilesError(
            str(path),
            f"linear.weight is {weight.shape[::-1]}, but its config says "
            f"{module.out_features} x {module.in_features}",
        )
    bias = tensors.get("linear.bias") if module.bias else None
    return Dense(weight, bias, module.activation)


def graph_cache(root: Path) -> Path:
    """Where graphs for this onnxruntime go: one folder per version, so an
    upgrade never serves a file another version's tools wrote."""
    import onnxruntime as ort

    return root / f"onnxruntime-{ort.__version__}"


def _fixed_sequences(
    tokenizer: HFTokenizer, most: int, texts: Sequence[str]
) -> list[tuple[I64, I64, F32]]:
    """Each text packed alone (no padding, at most ``most`` tokens), for comparing two graphs."""
    framing = tokenizer.framing()
    return [packing.pack([tokenizer.encode(t)[:most]], framing) for t in texts]


class NumpyForward:
    """The numpy encoder, with BLAS pools set to each call's thread count."""

    def __init__(self, weights: Weights) -> None:
        from threadpoolctl import ThreadpoolController

        self.weights = weights
        self._controller = ThreadpoolController()
        self._threads = 0

    def run(self, ids: I64, types: I64, mask: F32, threads: int) -> F32:
        if threads != self._threads:
            self._controller.limit(limits=threads)
            self._threads = threads
        w = self.weights
        return finish(w.ending, w.family.hidden_states(w.body, ids, types, mask), mask)

    def raw(
        self, ids: I64, types: I64, mask: F32, threads: int, names: Sequence[RawName]
    ) -> list[F32]:
        """:data:`~synapse_models.outputs.Raw`: ``names`` from one pass."""
        if threads != self._threads:
            self._controller.limit(limits=threads)
            self._threads = threads
        return numpy_raw(self.weights, ids, types, mask, names)


class OnnxSessions:
    """One onnxruntime session per thread count asked for (its intra-op pool
    is fixed when it is made), each made on first use, all of one file.

    On the CPU that file is the graph with its weights pre-packed
    (:func:`~synapse_models.sessions.packed_graph`): each session maps them
    from the file rather than packing a copy of its own, so the weights are
    held once however many thread counts a worker runs with.

    ``spinning``: idle pool threads spin-wait for the next operator
    (onnxruntime's default) or sleep; see the ``spin_wait`` option."""

    def __init__(
        self,
        path: Path,
        typed: bool,
        spinning: bool = True,
        providers: Sequence[Provider] = CPU,
    ) -> None:
        self.path = path
        self.typed = typed
        self.spinning = spinning
        self.providers = tuple(providers)
        self._sessions: dict[int, Any] = {}
        self._shared: Path | None = None

    @property
    def shared(self) -> Path:
        """The file every session is made of: on the CPU the pre-packed
        graph, built on first use; on other providers the graph itself."""
        if self._shared is None:
            cpu_only = self.providers == CPU
            self._shared = packed_graph(self.path) if cpu_only else self.path
        return self._shared

    def session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is None:
            session = onnx_session(self.shared, threads, self.spinning, self.providers)
            self._sessions[threads] = session
        return session

    def run(self, ids: I64, types: I64, mask: F32, threads: int) -> F32:
        feed = {"input_ids": ids, "attention_mask": mask}
        if self.typed:
            feed["token_type_ids"] = types
        out: F32 = self.session(threads).run(["output"], feed)[0]
        return out

    def raw(
        self, ids: I64, types: I64, mask: F32, threads: int, names: Sequence[RawName]
    ) -> list[F32]:
        """:data:`~synapse_models.outputs.Raw`: ``names``, the graph's outputs,
        from one run."""
        feed = {"input_ids": ids, "attention_mask": mask}
        if self.typed:
            feed["token_type_ids"] = types
        out: list[F32] = self.session(threads).run(list(names), feed)
        return out
