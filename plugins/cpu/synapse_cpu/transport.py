"""The ``cpu`` transport: every family of :mod:`synapse_models` on lane ``cpu:0``.

Host side only: it checks a model's files (cheaply when a catalog is built,
the weights' sha256 before a launch), gives the host the model's own
tokenizer, prices admissions in MiB and starts workers. Nothing here imports
numpy: the host stays light, the forward pass lives in the workers.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import anyio
import attrs

from synapse_core.plugin import (
    Availability,
    BasicTokenizer,
    ConfigError,
    Conversion,
    LaneInfo,
    Launched,
    LaunchRequest,
    ModelSource,
    ModelSpec,
    ModelTraits,
    Tokenizer,
    Transport,
    spawn_worker,
)
from synapse_models import files
from synapse_models.errors import ModelFilesError
from synapse_models.folder import Layout
from synapse_models.hosting import (
    folder_problem,
    host_tokenizer,
    layout_of,
    traits_of,
    verified_sha256,
    verify_before_launch,
)

from .cores import LANE_ID, usable_cores
from .costs import HIDDEN, copies, default_capacity_mib, request_budget, weights_mib
from .options import CpuOptions, parse_options

WORKER = "synapse_cpu.worker:CpuWorker"
log = logging.getLogger(__name__)


@functools.cache
def onnxruntime_problem() -> str:
    """Why the onnxruntime backend cannot run here ("" when it can); imports nothing.

    Looked up once per process: every call's cut asks the transport for its
    request budget, which depends on the runtime, and finding a module walks
    ``sys.path`` on disk (about 0.15-0.3 ms, a tenth of one short text's
    forward pass). What is installed does not change under a running host.
    """
    import importlib.util

    for module in ("onnxruntime", "onnx"):
        if importlib.util.find_spec(module) is None:
            return (
                f"{module} is not installed (a dependency of synapse-cpu): pip install "
                f'{module} (or set options.runtime = "numpy")'
            )
    return ""


def runtime_of(option: str | None) -> str:
    """The runtime a worker of the ``runtime`` option ``option`` will run: the
    option, or by default onnxruntime where it is installed, else numpy."""
    if option is not None:
        return option
    return "numpy" if onnxruntime_problem() else "onnxruntime"


@functools.cache
def _fallback_notice(problem: str) -> None:
    """Once per process: the default runtime is missing and numpy serves instead."""
    log.warning("synapse-cpu: %s; serving on numpy, about 3x slower", problem.split(" (")[0])


def _names_minilm(package: str) -> bool:
    """Whether ``package`` names the wheel's model: its name or its hub id, in any case."""
    return package.lower().removeprefix("sentence-transformers/") == files.MINILM_NAME.lower()


def package_problem(package: str) -> str:
    """Why ``package`` cannot stand alone (no ``model_dir`` nor ``hf``), and what to set."""
    if package.startswith(("/", ".", "~")) or "\\" in package:
        where = f'options.model_dir = "{package}"'
    elif package.count("/") == 1:
        where = f'options.hf = "{package}" (then `synapse pull`)'
    else:
        where = 'options.model_dir = "<its folder>" or options.hf = "<hub id>"'
    return (
        f"package: {package!r} is only a label to the cpu transport, which serves "
        f"{files.MINILM_NAME} unless told where the model is: set {where}, or "
        f'package = "{files.MINILM_NAME}" for MiniLM'
    )


def model_files(options: CpuOptions) -> files.ModelFiles:
    return files.locate(options.folder(), options.sha256)


@attrs.frozen
class ModelFacts:
    """What pricing an admission needs, read once per model folder."""

    #: the runtime's memory and every copy of the weights
    weights_mib: int
    hidden: int
    batch_tokens: int
    #: the copies of the model a worker may hold (``costs.copies``)
    copies: int = 1


def model_facts(model: ModelSpec) -> ModelFacts:
    options = parse_options(model.options, source=f"model {model.name!r}")
    located = model_files(options)
    runtime = runtime_of(options.runtime)
    held = copies(runtime, options.threads, usable_cores())
    return _facts(located.root, runtime, options.batch_tokens, held)


@functools.lru_cache(maxsize=64)
def _facts(root: Path, runtime: str, batch_tokens: int, held: int) -> ModelFacts:
    located = files.ModelFiles(root, "", None)
    hidden = int(files.read_json(located.config).get("hidden_size", HIDDEN))
    size = located.weights.stat().st_size
    return ModelFacts(weights_mib(size, runtime, held), hidden, batch_tokens, held)


class CpuTransport(Transport):
    """Options are checked and buckets declared by the kit's defaults (``options_type``)."""

    name = "cpu"
    worker = WORKER
    options_type = CpuOptions

    def model_from_source(self, source: ModelSource) -> ModelSpec:
        """A folder's or a hub id's entry, its task read from the folder (``--model``)."""
        from .flagged import model_from_source

        return model_from_source(self, source)

    def describe(self) -> str:
        problem = onnxruntime_problem()
        wheel = files.wheel_model_dir()
        runtimes = f"numpy (onnxruntime: {problem})" if problem else "onnxruntime (default), numpy"
        return "; ".join(
            [
                f"runtimes: {runtimes}; {usable_cores()} cores",
                f"model wheel: {wheel}" if wheel else f"model wheel missing: {files.INSTALL_HINT}",
                f"lane {LANE_ID}: {default_capacity_mib()} MiB",
            ]
        )

    def model_note(self, model: ModelSpec) -> str:
        """The memory one worker holds (:func:`worker_mib`); for int8: that it
        is lossy, and its worst cosine (a cross-encoder's: score difference)
        to float32 once measured."""
        memory = memory_note(self.model_options(model))
        conversion_note = self._conversion_note(model)
        return "; ".join(note for note in (memory, conversion_note) if note)

    def _conversion_note(self, model: ModelSpec) -> str:
        conversion = self.model_conversion(model)
        if conversion is None:
            return ""
        from synapse_models import quantize

        if conversion.max_score_delta is not None and conversion.mean_score_delta is not None:
            return quantize.describe_scores(conversion.max_score_delta, conversion.mean_score_delta)
        if conversion.min_cosine is None or conversion.mean_cosine is None:
            return (
                f"{conversion.name} (dynamic quantization, lossy): worst cosine to float32 "
                "measured when its graph is first built"
            )
        return quantize.describe(conversion.min_cosine, conversion.mean_cosine)

    def model_conversion(self, model: ModelSpec) -> Conversion | None:
        """For int8: its worst and mean cosine (or score difference) to
        float32, once its graph is built."""
        options: CpuOptions = self.model_options(model)
        if options.quantize is None:
            return None
        from synapse_models import quantize
        from synapse_models.onnx_file import default_cache_dir

        located = model_files(options)
        root = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
        # a folder without an expected hash: hash it (remembered)
        sha256 = located.sha256 or verified_sha256(located)
        # the worker measured it with the catalog's instruction, if any
        layout = layout_of(located, options.instruction)
        loss = quantize.read_loss(root, files.int8_key(located, layout, sha256.lower()))
        if loss is None:
            return Conversion(options.quantize)
        return Conversion(
            options.quantize,
            loss.min_cosine,
            loss.mean_cosine,
            loss.max_score_delta,
            loss.mean_score_delta,
        )

    def model_availability(self, model: ModelSpec) -> Availability:
        options: CpuOptions = self.model_options(model)
        if options.model_dir is None and options.hf is None and not _names_minilm(model.package):
            # MiniLM's wheel would serve it: a catalog naming another model
            # there would get MiniLM's vectors unawares.
            return Availability.no(package_problem(model.package))
        wants_onnx = options.runtime == "onnxruntime" or options.quantize is not None
        if wants_onnx and (problem := onnxruntime_problem()):
            return Availability.no(problem)
        try:
            located = model_files(options)
            layout = layout_of(located, options.instruction)
        except ModelFilesError as exc:
            return Availability.no(str(exc))
        if problem := folder_problem(located, layout, model.task, options.buckets):
            return Availability.no(problem)
        memory = worker_mib(options)
        capacity = default_capacity_mib()
        if memory > capacity:
            return Availability.no(
                f"{located.weights}: one worker of this model holds about {memory} MiB "
                f"(weights file {memory - runtime_mib(options)} MiB + runtime "
                f"{runtime_mib(options)} MiB), more than the {capacity} MiB of lane "
                f"{LANE_ID} (half this machine's memory)"
            )
        return Availability.yes()

    def buckets(self, model: ModelSpec) -> tuple[int, ...] | None:
        """``options.buckets``, or from the folder's ceiling (``max_seq_length``)."""
        options: CpuOptions = self.model_options(model)
        if options.buckets:
            return tuple(sorted(options.buckets))
        layout = _layout(options)
        return None if layout is None else layout.buckets()

    def traits(self, model: ModelSpec) -> ModelTraits:
        """The folder's prompts, and whether a rerank model is a cross-encoder,
        an LLM reranker (with the instruction its prompt holds), a ColBERT
        model scoring by MaxSim or a bi-encoder."""
        layout = _layout(self.model_options(model))
        if layout is None:
            return ModelTraits()
        traits = traits_of(layout, model.task)
        return attrs.evolve(traits, worker_mib=worker_mib(self.model_options(model)))

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return LaneInfo(LANE_ID, capacity=default_capacity_mib())

    def max_batch_tokens(self, model: ModelSpec) -> int:
        """From the runtime alone. Asked for every call's cut, so it reads the
        one option it needs: the host checked them all when it opened
        (``validate_model``), and structuring them again costs more than the
        rest of the cut."""
        return request_budget(runtime_of(model.options.get("runtime")))

    def tokenizer(self, model: ModelSpec) -> Tokenizer:
        try:
            options = parse_options(model.options)
            located = model_files(options)
            return host_tokenizer(located.tokenizer, layout_of(located, options.instruction))
        except (ModelFilesError, ConfigError, OSError):
            return BasicTokenizer()  # the model is unavailable and refused before tokenizing

    async def launch(self, request: LaunchRequest) -> Launched:
        options: CpuOptions = self.model_options(request.model)
        await anyio.to_thread.run_sync(
            verify_before_launch, model_files(options), options.instruction
        )
        if options.runtime is None and (problem := onnxruntime_problem()):
            _fallback_notice(problem)
        # BLAS pools sized before numpy loads: the most threads a request may
        # use (the worker sets each request's count within it).
        threads = str(options.threads or usable_cores())
        env = {f"{pool}_NUM_THREADS": threads for pool in ("OPENBLAS", "OMP", "MKL")}
        return await spawn_worker(self.worker, request, env=env)


def worker_mib(options: CpuOptions) -> int:
    """The memory one worker of the model holds, in MiB, from its weights
    file's size (nothing is loaded): the weights, held once however many
    thread counts the worker runs with, and the runtime
    (:func:`synapse_cpu.costs.weights_mib`; an int8 worker holds less)."""
    located = model_files(options)
    return weights_mib(located.weights.stat().st_size, runtime_of(options.runtime))


def runtime_mib(options: CpuOptions) -> int:
    """The runtime's part of :func:`worker_mib`."""
    return weights_mib(0, runtime_of(options.runtime))


def memory_note(options: CpuOptions) -> str:
    """The catalog's line on a worker's memory; empty when the files are missing."""
    try:
        memory = worker_mib(options)
    except (OSError, ModelFilesError):
        return ""
    int8 = "" if options.quantize is None else " (from the float32 weights; int8 holds less)"
    return f"memory per worker: about {memory} MiB{int8}"


def _layout(options: CpuOptions) -> Layout | None:
    """The folder's layout (with the catalog's instruction), or ``None`` when
    it has a problem (which ``model_availability`` reports)."""
    try:
        return layout_of(model_files(options), options.instruction)
    except ModelFilesError:
        return None


__all__ = ["LANE_ID", "CpuTransport"]
