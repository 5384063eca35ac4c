"""The CUDA worker: a :class:`~synapse_core.plugin.ModelWorker` over
:mod:`synapse_models` on one GPU.

The transport starts it as ``synapse_cuda.worker:CudaWorker`` with the GPU's
lane lock inherited; it refuses to touch the device without that lock. It
loads the family's graph (float16 or float32) on onnxruntime's CUDA
execution provider (the simulated device: its CPU one), refuses to run when
onnxruntime left the CUDA provider out of its session (it falls back to the
CPU with no more than a log line otherwise), and measures what its weights
and each admitted shape take on the device (:mod:`.costs`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from synapse_core.plugin import Declined, ModelWorker, Shape, worker_main
from synapse_models import files, packing
from synapse_models import model as runtime

from . import __version__, costs
from .device import CUDA, Device, Nvml, NvmlDevice, SimulatedDevice, simulated_mib, visible_entries
from .lanelock import holds_lane
from .options import CudaOptions

IMPLEMENTATION = "synapse-cuda"
ENV_DEVICE = "SYNAPSE_CUDA_DEVICE"
ENV_LANE_FD = "SYNAPSE_CUDA_LANE_FD"
ENV_LANE_LOCK = "SYNAPSE_CUDA_LANE_LOCK"


def inherited_lane_lock(env: Mapping[str, str]) -> bool:
    """Whether this process holds its lane's lock, through the descriptor it inherited."""
    fd, path = env.get(ENV_LANE_FD, ""), env.get(ENV_LANE_LOCK, "")
    return fd.isdigit() and bool(path) and holds_lane(int(fd), path)


def open_device(env: Mapping[str, str], gpu: int) -> Device:
    """The worker's GPU: the simulated one, or the ``gpu``-th visible NVIDIA GPU."""
    if env.get(ENV_DEVICE) == "simulated":
        return SimulatedDevice(gpu, simulated_mib(env))
    nvml = Nvml()
    entries = visible_entries(env, nvml.count())
    if gpu >= len(entries):
        raise ValueError(f"GPU {gpu} is not visible (CUDA_VISIBLE_DEVICES: {entries})")
    return NvmlDevice(nvml, gpu, entries[gpu])


class CudaWorker(ModelWorker):
    """One model on one GPU, its memory measured as it loads and as each shape is admitted."""

    options_type = CudaOptions
    implementation = IMPLEMENTATION
    version = __version__
    #: where the worker reads its device and lane lock; ``None``: its process's
    #: environment (an in-process variant in tests gives the transport's)
    environ: Mapping[str, str] | None = None

    def load(self, options: CudaOptions) -> None:
        env = os.environ if self.environ is None else self.environ
        if not inherited_lane_lock(env):
            raise ValueError(
                "this worker does not hold its GPU's lane lock (started outside the cuda "
                "transport, or the lock was not inherited): it never touches the device"
            )
        self.device = open_device(env, options.gpu)
        self.options = options
        located = files.locate(options.folder(), options.sha256)
        self.table = costs.table_path(self.device.name, located.weights, options.precision)
        before = self.device.memory_used()
        self.runner = runtime.load(
            options.folder(),
            options.sha256,
            "onnxruntime",
            cache_dir=options.cache_dir,
            batch_tokens=options.batch_tokens,
            threads=options.threads,
            spinning=False,
            providers=self.device.providers(),
            lane="cuda",
            precision=options.precision,
            engine=f"-cuda-{options.precision}",
            instruction=options.instruction,
        )
        wanted = [p if isinstance(p, str) else p[0] for p in self.device.providers()]
        in_use = self.runner.providers_in_use()
        if CUDA in wanted and CUDA not in in_use:
            raise ValueError(
                f"onnxruntime runs the graph on {', '.join(in_use)} only: its {CUDA} did not "
                "load (CUDA or cuDNN libraries not found: see its log above); refusing to "
                "serve a GPU lane on the CPU"
            )
        size = located.weights.stat().st_size
        self.device.allocated(costs.estimate_weights(size, options.precision))
        costs.record(self.table, max(1, self.device.memory_used() - before))
        self.buckets = options.buckets or self.runner.layout.buckets()
        self.max_batch = options.max_batch
        self.dims = self.runner.dims
        self.identity = self.runner.identity

    def admit(self, shape: Shape) -> None:
        """Warm ``shape``: one forward pass at its widest slice, its memory measured."""
        framing = self.runner.framing
        width = shape.bucket - framing.single
        if width < 1:
            raise Declined(f"bucket {shape.bucket} leaves no room for a token", "bad-shape")
        rows = min(shape.batch, max(1, self.options.batch_tokens // shape.bucket))
        token = (self.runner.tokenizer.encode("warm") or [framing.before[0]])[0]
        before = self.device.memory_used()
        self.runner.forward(*packing.pack([[token] * width] * rows, framing))
        hidden, heads = _sizes(self.runner)
        estimate = costs.estimate_shape(
            shape, self.options.batch_tokens, hidden, heads, self.options.precision
        )
        self.device.allocated(estimate)
        costs.record(self.table, max(1, self.device.memory_used() - before), shape)

    def embed(self, batch: list[list[int]]) -> runtime.Vectors:
        return self.runner.embed(batch)

    def rerank(self, query: list[int], batch: list[list[int]]) -> runtime.Vectors:
        return self.runner.rerank(query, batch)

    def classify(self, query: list[int] | None, batch: list[list[int]]) -> runtime.Vectors:
        return self.runner.classify(query, batch)

    def trace_facts(self) -> dict[str, object]:
        return {
            "runtime": self.runner.runtime,
            "precision": self.runner.precision,
            "providers": self.runner.providers_in_use(),
            "device": self.device.name,
            "weights_sha256": self.runner.sha256,
            "model_kind": self.runner.layout.kind,
        }


def _sizes(runner: runtime.Model) -> tuple[int, int]:
    data = files.read_json(runner.files.config)
    hidden = int(data.get("hidden_size", 384))
    return hidden, int(data.get("num_attention_heads", max(1, hidden // 64)))


if __name__ == "__main__":
    sys.exit(worker_main(CudaWorker))
