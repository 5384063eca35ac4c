"""What a CUDA worker costs its GPU, in MiB: the lane's capacity is GPU memory.

A worker's weights (with its CUDA context and onnxruntime's workspaces) are
charged with the first shape it admits; each admitted shape adds what
warming it took on the device. Both are *measured* by the worker: the
device's memory in use before and after it loads, and before and after it
runs a shape's first forward pass (onnxruntime's arena grows by what is
asked, and keeps it for the worker's life). The worker writes what it
measured into a small table per kind of GPU and model
(:func:`table_path`); the host charges from that table, and from an
estimate (:func:`estimate_weights`, :func:`estimate_shape`, generous) for
what nobody has measured yet: the first admission of a shape on a machine is
charged the estimate, every later one (another worker, a restart, the next
host) what it was measured to take. The simulated device "measures" the
estimate: it has no allocator to ask.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import tempfile
from pathlib import Path

import attrs

from synapse_core.plugin import Shape

MIB = 1 << 20
#: one worker's CUDA context, cuBLAS and cuDNN handles and workspaces, and
#: onnxruntime's own buffers, besides its weights (MiB)
RUNTIME_MIB = 512
#: the share of a GPU's memory the lane offers by default: the rest is the
#: driver's and other programs' margin
CAPACITY_SHARE = 0.9
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def capacity_mib(total_mib: int) -> int:
    """The lane's default capacity on a GPU of ``total_mib``."""
    return max(1, int(total_mib * CAPACITY_SHARE))


def float_bytes(precision: str) -> int:
    return 2 if precision == "fp16" else 4


def estimate_weights(weights_bytes: int, precision: str) -> int:
    """A worker's weights on the GPU in ``precision`` (the file holds float32), plus its runtime."""
    on_gpu = weights_bytes * float_bytes(precision) // 4
    return math.ceil(on_gpu / MIB) + RUNTIME_MIB


def estimate_shape(shape: Shape, batch_tokens: int, hidden: int, heads: int, precision: str) -> int:
    """The activations of one forward pass of ``shape``: at the MLP's peak the
    hidden states, the 4x widened rows and their GELU's temporaries; in
    attention the scores, and in float16 their float32 copies around Softmax."""
    rows = min(shape.batch, max(1, batch_tokens // shape.bucket))
    positions = rows * shape.bucket
    size = float_bytes(precision)
    scores = rows * heads * shape.bucket**2 * (size + (8 if precision == "fp16" else 0))
    return math.ceil((positions * hidden * 18 * size + scores) / MIB) + 1


def shape_key(shape: Shape) -> str:
    return f"{shape.bucket}x{shape.batch}"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "synapse" / "cuda"


def table_path(device_name: str, weights: Path, precision: str, root: Path | None = None) -> Path:
    """The measurements of a model (its weights file as it is now) in
    ``precision`` on a kind of GPU: one JSON file."""
    stat = weights.stat()
    key = f"{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{precision}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return (root or cache_root()) / "measured" / _UNSAFE.sub("_", device_name) / f"{digest}.json"


@attrs.frozen
class Measured:
    """What workers measured: the weights' MiB (``None``: not yet) and each shape's."""

    weights: int | None = None
    shapes: dict[str, int] = attrs.field(factory=dict)


def read_table(path: Path) -> Measured:
    """The table at ``path`` (empty when there is none, or it cannot be read)."""
    try:
        stat = path.stat()
    except OSError:
        return Measured()
    return _read(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _read(path: Path, size: int, mtime_ns: int) -> Measured:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        weights = data.get("weights")
        shapes = {str(k): int(v) for k, v in data.get("shapes", {}).items()}
        return Measured(int(weights) if weights is not None else None, shapes)
    except (OSError, ValueError, TypeError, AttributeError):
        return Measured()


def record(path: Path, mib: int, shape: Shape | None = None) -> None:
    """Write what a worker measured (its weights, or ``shape``'s) into the
    table at ``path``: under a lock, written aside and renamed, so workers
    measuring at once lose nothing and readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_suffix(".lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data: dict[str, object] = {"weights": None, "shapes": {}}
        with contextlib.suppress(OSError, ValueError):
            data.update(json.loads(path.read_text(encoding="utf-8")))
        if shape is None:
            data["weights"] = mib
        else:
            shapes = data["shapes"] if isinstance(data["shapes"], dict) else {}
            data["shapes"] = {**shapes, shape_key(shape): mib}
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
