"""The ``ane-direct`` transport: Neural Engine workers on lane ``ane:0``.

The lane needs the cross-process lane lock (:mod:`.lanelock`), taken by the
host's first load on the lane and inherited by every worker. Workers start
with ``TMPDIR`` removed: the native Neural Engine compiler needs its normal
per-user temporary directory, not an override.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from synapse_core.plugin import (
    Availability,
    LaneInfo,
    Launched,
    LaunchRequest,
    ModelSpec,
    Tokenizer,
    Transport,
    spawn_worker,
)

from .availability import probe as hardware_probe
from .lanelock import LaneLock, acquire
from .options import DEVICE_KINDS, AneOptions

NAME = "ane-direct"
#: Capacity in reservation units (bucket x batch with the default cost).
LANE = LaneInfo("ane:0", capacity=65_536, hardware_lock=True)
WORKER = "synapse_ane_direct.worker:AneWorker"

ENV_DEVICE = "SYNAPSE_ANE_DEVICE"
ENV_LANE_FD = "SYNAPSE_ANE_LANE_FD"
ENV_LANE_LOCK = "SYNAPSE_ANE_LANE_LOCK"
#: Removed from every worker's environment (see the module docstring).
UNSET_ENV = ("TMPDIR",)

#: The package of the shipped models: all-MiniLM-L6-v2, one program per
#: bucket (positions including [CLS] and [SEP]; 256 is the model's ceiling).
MINILM_PACKAGE = "ane-all-minilm-l6-v2"
MINILM_OPTIONS = {"dims": 384, "buckets": [32, 64, 128, 256]}
SHIPPED_MODELS = (
    ModelSpec(
        name="ane-minilm",
        task="embed",
        transport=NAME,
        package=MINILM_PACKAGE,
        ceiling=256,
        options=MINILM_OPTIONS,
    ),
    # A bi-encoder: the cosine of the query's and each document's embedding.
    ModelSpec(
        name="ane-rerank-minilm",
        task="rerank",
        transport=NAME,
        package=MINILM_PACKAGE,
        ceiling=256,
        options=MINILM_OPTIONS,
    ),
)


class AneDirectTransport(Transport):
    """Direct Neural Engine transport.

    ``device="simulated"`` (or ``SYNAPSE_ANE_DEVICE=simulated``) runs the
    simulated device, for tests. ``runtime_dir`` overrides where lane locks
    live (default: ``$XDG_RUNTIME_DIR/synapse`` or ``<temp>/synapse-<uid>``).
    """

    name = NAME
    worker = WORKER
    options_type = AneOptions

    def __init__(
        self,
        device: str | None = None,
        *,
        runtime_dir: str | Path | None = None,
        probe: Callable[[], str] = hardware_probe,
    ) -> None:
        self._device = device
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None else None
        self._probe = probe

    @property
    def device(self) -> str:
        """The workers' device: the constructor's, else ``$SYNAPSE_ANE_DEVICE``, else hardware."""
        return self._device or os.environ.get(ENV_DEVICE) or "hardware"

    def availability(self) -> Availability:
        device = self.device
        if device not in DEVICE_KINDS:
            return Availability.no(
                f"{ENV_DEVICE}={device!r} is not one of {', '.join(DEVICE_KINDS)}"
            )
        if device == "simulated":
            return Availability.yes()
        reason = self._probe()
        return Availability.no(reason) if reason else Availability.yes()

    def catalog_models(self) -> Sequence[ModelSpec]:
        return SHIPPED_MODELS

    def lane_for(self, model: ModelSpec) -> LaneInfo:
        return LANE

    def tokenizer(self, model: ModelSpec) -> Tokenizer:
        """MiniLM's own tokenizer for the shipped MiniLM models (their programs
        embed its word pieces); the default tokenizer for any other package."""
        if model.package == MINILM_PACKAGE:
            from .model_files import ModelTokenizer

            return ModelTokenizer()
        return super().tokenizer(model)

    async def open_lane(self, lane: LaneInfo) -> LaneLock:
        return acquire(lane.lane_id, self.runtime_dir)

    async def launch(self, request: LaunchRequest) -> Launched:
        lock = held_lane(request)
        return await spawn_worker(
            self.worker,
            request,
            env=self.worker_env(lock),
            unset_env=UNSET_ENV,
            pass_fds=lock.pass_fds,
        )

    def worker_env(self, lock: LaneLock) -> Mapping[str, str]:
        """What a worker is told besides its launch spec."""
        return {ENV_DEVICE: self.device, ENV_LANE_FD: str(lock.fd), ENV_LANE_LOCK: str(lock.path)}


def held_lane(request: LaunchRequest) -> LaneLock:
    """The request's lane lock; a direct-ANE worker never starts without one."""
    session = request.lane_session
    if not isinstance(session, LaneLock) or session.closed:
        raise RuntimeError(
            f"{request.model.name!r}: direct-ANE workers start only on a lane whose lock this "
            "host holds (open_lane was not called or the lock was released)"
        )
    return session
