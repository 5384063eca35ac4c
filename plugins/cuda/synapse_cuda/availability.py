"""Whether the CUDA lane can run here, and if not, why, in one line.

Checked in order, cheapest first, each with what the user can do:

1. onnxruntime: installed, and not as two builds at once (its CPU build
   ``onnxruntime`` and its CUDA build ``onnxruntime-gpu`` install the same
   module: having both leaves whichever files were written last);
2. the NVIDIA driver: NVML (``libnvidia-ml.so.1``) loads and answers;
3. a GPU: the driver finds one, and ``CUDA_VISIBLE_DEVICES`` does not hide it;
4. onnxruntime's CUDA execution provider: in ``get_available_providers()``
   (the CPU build has none).

Nothing here creates a CUDA context: the host only reads NVML. That the CUDA
provider's own libraries (CUDA, cuDNN) load is seen by the first worker,
which refuses to run when onnxruntime left the provider out of its session.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping, Sequence

import attrs

from .device import CUDA, Nvml, NvmlError, visible_entries

INSTALL = "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu"


def installed_builds() -> list[str]:
    """Which of onnxruntime's distributions are installed."""
    found = []
    for name in ("onnxruntime", "onnxruntime-gpu"):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def available_providers() -> list[str]:
    """onnxruntime's execution providers in this environment (imports it)."""
    import onnxruntime

    providers: list[str] = onnxruntime.get_available_providers()
    return providers


@attrs.frozen
class Probe:
    """Where each check looks; tests give fakes."""

    builds: Callable[[], Sequence[str]] = installed_builds
    nvml: Callable[[], Nvml] = Nvml
    providers: Callable[[], Sequence[str]] = available_providers
    module_found: Callable[[], bool] = lambda: importlib.util.find_spec("onnxruntime") is not None


@attrs.frozen
class Found:
    """What the probe found: a reason the lane cannot run (empty when it can),
    and the visible GPUs' ``CUDA_VISIBLE_DEVICES`` entries."""

    reason: str = ""
    entries: tuple[str, ...] = ()
    nvml: Nvml | None = None


def probe(env: Mapping[str, str], where: Probe = Probe()) -> Found:
    """The checks of the module docstring, in order; the first that fails is the reason."""
    builds = list(where.builds())
    if len(builds) > 1:
        return Found(
            "both onnxruntime and onnxruntime-gpu are installed: they share the module "
            f"onnxruntime and leave a broken mix; {INSTALL}"
        )
    if not builds and not where.module_found():
        return Found("onnxruntime is not installed: pip install onnxruntime-gpu")
    try:
        nvml = where.nvml()
        count = nvml.count()
    except NvmlError as exc:
        return Found(str(exc))
    if count == 0:
        return Found("no NVIDIA GPU: the driver finds none")
    entries = visible_entries(env, count)
    if not entries:
        shown = env.get("CUDA_VISIBLE_DEVICES", "")
        return Found(f"CUDA_VISIBLE_DEVICES={shown!r} hides every one of the {count} GPUs")
    if any(entry.startswith("MIG-") for entry in entries):
        return Found("CUDA_VISIBLE_DEVICES names MIG instances: the CUDA lane serves whole GPUs")
    try:
        providers = list(where.providers())
    except ImportError as exc:
        return Found(f"onnxruntime cannot be imported ({exc}); {INSTALL}")
    if CUDA not in providers:
        build = builds[0] if builds else "onnxruntime"
        return Found(
            f"{build} has no {CUDA} (only {', '.join(providers) or 'none'}): "
            f"the CPU build is installed; {INSTALL}"
        )
    return Found("", tuple(entries), nvml)
