"""The ``cuda`` transport: every family of :mod:`synapse_models` on NVIDIA GPUs.

Its lanes are GPUs, ``cuda:0``, ``cuda:1``, ...: the GPUs
``CUDA_VISIBLE_DEVICES`` shows, in its order (all of them when it is unset);
a model's ``options.gpu`` picks one. Each lane holds the GPU's cross-process
lock (:mod:`.lanelock`), taken before its first worker starts and inherited by
every worker, and is charged in MiB of the GPU's memory (:mod:`.costs`).

Host side only: it probes the driver through NVML (no CUDA context), checks
a model's files, gives the host the model's own tokenizer and starts
workers. ``SYNAPSE_CUDA_DEVICE=simulated`` (or ``device="simulated"``) runs
the simulated device instead: the same workers on onnxruntime's CPU
execution provider, with ``SYNAPSE_CUDA_SIMULATED_MIB`` of memory.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path

import anyio
import attrs

from synapse_core.plugin import (
    Availability,
    BasicTokenizer,
    ConfigError,
    LaneInfo,
    Launched,
    LaunchRequest,
    ModelSpec,
    ModelTraits,
    Tokenizer,
    Transport,
    spawn_worker,
)
from synapse_models import files
from synapse_models.errors import ModelFilesError
from synapse_models.folder import Layout, read_json
from synapse_models.hosting import (
    folder_problem,
    host_tokenizer,
    layout_of,
    traits_of,
    verify_before_launch,
)

from . import costs
from .availability import Found, Probe, probe
from .device import Device, NvmlDevice, SimulatedDevice, simulated_mib, visible_entries
from .lanelock import LaneLock, acquire
from .options import CudaOptions, parse_options

NAME = "cuda"
WORKER = "synapse_cuda.worker:CudaWorker"
ENV_DEVICE = "SYNAPSE_CUDA_DEVICE"
ENV_SIMULATED_MIB = "SYNAPSE_CUDA_SIMULATED_MIB"
#: how many GPUs the simulated device has (default 1)
ENV_SIMULATED_GPUS = "SYNAPSE_CUDA_SIMULATED_GPUS"
ENV_LANE_FD = "SYNAPSE_CUDA_LANE_FD"
ENV_LANE_LOCK = "SYNAPSE_CUDA_LANE_LOCK"
DEVICE_KINDS = ("nvidia", "simulated")
#: the positions one request carries by default: a GPU's forward pass of
#: BERT-base over this many takes a few tens of milliseconds
REQUEST_POSITIONS = 32_768


def lane_id(gpu: int) -> str:
    return f"{NAME}:{gpu}"


def gpu_of(lane: str) -> int:
    return int(lane.rsplit(":", 1)[1])


@attrs.frozen
class ModelFacts:
    """What pricing an admission needs, read once per model folder and device."""

    weights_bytes: int
    hidden: int
    heads: int
    precision: str
    batch_tokens: int
    #: where workers record what they measured (:func:`costs.table_path`)
    table: Path


@functools.lru_cache(maxsize=64)
def _config_facts(config: Path) -> tuple[int, int]:
    data = read_json(config)
    hidden = int(data.get("hidden_size", 384))
    return hidden, int(data.get("num_attention_heads", max(1, hidden // 64)))


class CudaTransport(Transport):
    """GPU lanes ``cuda:N``; ``device="simulated"`` runs the simulated device
    (or ``SYNAPSE_CUDA_DEVICE=simulated``); ``runtime_dir`` is where lane
    locks live (default: ``$XDG_RUNTIME_DIR/synapse`` or ``/tmp/synapse-<uid>``);
    ``where`` is where the availability probe looks (tests give fakes)."""

    name = NAME
    worker = WORKER
    options_type = CudaOptions
    # Defaults for a subclass whose __init__ does not call this one's (an
    # in-process variant mixing in InProcessWorkers).
    _device: str | None = None
    runtime_dir: Path | None = None
    _where: Probe | None = None
    _env: Mapping[str, str] | None = None
    #: the probe's answer, by the device kind it was made for
    _found: dict[str, Found] | None = None
    _devices: dict[int, Device] | None = None

    def __init__(
        self,
        device: str | None = None,
        *,
        runtime_dir: str | Path | None = None,
        where: Probe | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._device = device
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None
        self._where = where
        self._env = env

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    @property
    def device_kind(self) -> str:
        """The workers' device: the constructor's, else ``$SYNAPSE_CUDA_DEVICE``, else nvidia."""
        return self._device or self.env.get(ENV_DEVICE) or "nvidia"

    def found(self) -> Found:
        """The probe's answer, once per transport and device kind (what is
        installed does not change; ``$SYNAPSE_CUDA_DEVICE`` may, between two
        hosts of one process)."""
        kind = self.device_kind
        if self._found is None:
            self._found = {}
        found = self._found.get(kind)
        if found is None:
            if kind not in DEVICE_KINDS:
                found = Found(f"{ENV_DEVICE}={kind!r} is not one of {', '.join(DEVICE_KINDS)}")
            elif kind == "simulated":
                found = Found("", tuple(visible_entries(self.env, 1)) or ("0",))
            else:
                try:
                    found = probe(self.env, self._where or Probe())
                except Exception as exc:  # a probe never raises out of availability
                    found = Found(f"probing the GPUs failed: {exc!r}")
            self._found[kind] = found
        return found

    def device(self, gpu: int) -> Device:
        """The host's view of lane ``cuda:gpu``'s GPU (memory and identity; it never computes)."""
        if self._devices is None:
            self._devices = {}
        device = self._devices.get(gpu)
        if device is None:
            found = self.found()
            if found.reason or gpu >= len(found.entries):
                raise ValueError(f"GPU {gpu} is not available: {found.reason or 'not visible'}")
            if found.nvml is None:  # simulated: read afresh, as its workers read it
                return SimulatedDevice(gpu, simulated_mib(self.env))
            device = NvmlDevice(found.nvml, gpu, found.entries[gpu])
            self._devices[gpu] = device
        return device

    def availability(self) -> Availability:
        reason = self.found().reason
        return Availability.no(reason) if reason else Availability.yes()

    def describe(self) -> str:
        found = self.found()
        if found.reason:
            return found.reason
        gpus = []
        for gpu in range(len(found.entries)):
            device = self.device(gpu)
            gpus.append(f"{lane_id(gpu)}: {device.name}, {device.memory_total()} MiB")
        return "; ".join([*gpus, "float16 by default (options.precision)"])

    def model_availability(self, model: ModelSpec) -> Availability:
        options: CudaOptions = self.model_options(model)
        visible = len(self.found().entries)
        if options.gpu >= visible:
            return Availability.no(
                f"options.gpu = {options.gpu}, but {visible} GPU(s) are visible "
                f"(lanes {', '.join(lane_id(i) for i in range(visible)) or 'none'}; "
                f"CUDA_VISIBLE_DEVICES={self.env.get('CUDA_VISIBLE_DEVICES')!r})"
            )
        try:
            located = files.locate(options.folder(), options.sha256)
            layout = layout_of(located, options.instruction)
        except ModelFilesError as exc:
            return Availability.no(str(exc))
        if problem := folder_problem(located, layout, model.task, options.buckets):
            return Availability.no(problem)
        return Availability.yes()

    def buckets(self, model: ModelSpec) -> tuple[int, ...] | None:
        """``options.buckets``, or from the folder's ceiling (``max_seq_length``)."""
        options: CudaOptions = self.model_options(model)
        if options.buckets:
            return tuple(sorted(options.buckets))
        layout = _layout(options)
        return None if layout is None else layout.buckets()

    def traits(self, model: ModelSpec) -> ModelTraits:
        """The folder's prompts, and whether a rerank model is a cross-encoder,
        an LLM reranker (with the instruction its prompt holds) or a bi-encoder."""
        layout = _layout(self.model_options(model))
        return ModelTraits() if layout is None else traits_of(layout, model.task)

    def tokenizer(self, model: ModelSpec) -> Tokenizer:
        try:
            options = parse_options(model.options)
            located = files.locate(options.folder(), options.sha256)
            return host_tokenizer(located.tokenizer, layout_of(located, options.instruction))
        except (ModelFilesError, ConfigError, OSError):
            return BasicTokenizer()  # the model is unavailable and refused before tokenizing

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        """``cuda:N`` of ``options.gpu``, its capacity a share of the GPU's memory."""
        gpu = int(model.options.get("gpu", 0))
        try:
            capacity = costs.capacity_mib(self.device(gpu).memory_total())
        except (ValueError, OSError):
            capacity = 1  # unavailable: refused before it is ever charged
        return LaneInfo(lane_id(gpu), capacity=capacity, hardware_lock=True)

    def max_batch_tokens(self, model: ModelSpec) -> int:
        return REQUEST_POSITIONS

    def facts(self, model: ModelSpec) -> ModelFacts:
        """What pricing ``model``'s admissions needs (cheap after the first call)."""
        options: CudaOptions = self.model_options(model)
        located = files.locate(options.folder(), options.sha256)
        hidden, heads = _config_facts(located.config)
        device = self.device(options.gpu)
        table = costs.table_path(device.name, located.weights, options.precision)
        size = located.weights.stat().st_size
        return ModelFacts(size, hidden, heads, options.precision, options.batch_tokens, table)

    async def open_lane(self, lane: LaneInfo) -> LaneLock:
        """The GPU's lock, named by its UUID: two hosts never share one GPU."""
        device = self.device(gpu_of(lane.lane_id))
        return acquire(lane.lane_id, self.runtime_dir, name=device.uuid)

    async def launch(self, request: LaunchRequest) -> Launched:
        lock = held_lane(request)
        options: CudaOptions = self.model_options(request.model)
        located = files.locate(options.folder(), options.sha256)
        await anyio.to_thread.run_sync(verify_before_launch, located, options.instruction)
        return await spawn_worker(
            self.worker, request, env=self.worker_env(lock), pass_fds=lock.pass_fds
        )

    def worker_env(self, lock: LaneLock) -> Mapping[str, str]:
        """What a worker is told besides its launch spec."""
        return {
            ENV_DEVICE: self.device_kind,
            ENV_SIMULATED_MIB: str(simulated_mib(self.env)),
            ENV_LANE_FD: str(lock.fd),
            ENV_LANE_LOCK: str(lock.path),
            # onnxruntime's device_id N is then the GPU NVML finds for the same entry
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        }


def held_lane(request: LaunchRequest) -> LaneLock:
    """The request's lane lock; a CUDA worker never starts without one."""
    session = request.lane_session
    if not isinstance(session, LaneLock) or session.closed:
        raise RuntimeError(
            f"{request.model.name!r}: CUDA workers start only on a lane whose lock this "
            "host holds (open_lane was not called or the lock was released)"
        )
    return session


def _layout(options: CudaOptions) -> Layout | None:
    """The folder's layout (with the catalog's instruction), or ``None`` when
    it has a problem (which ``model_availability`` reports)."""
    try:
        return layout_of(files.locate(options.folder(), options.sha256), options.instruction)
    except ModelFilesError:
        return None


__all__ = ["NAME", "CudaTransport"]
