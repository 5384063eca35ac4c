"""``synapse ane selftest``: compile every bucket on this Mac's Neural Engine,
run the reference texts, and compare with a reference forward pass.

It takes the ``ane:0`` lane lock like any host and runs the device in a worker
process started like a host's (lock inherited, ``TMPDIR`` removed). It prints
per bucket the compile time, the p50 latency of one sequence, and the lowest
cosine similarity with a reference forward pass of the same texts (the numpy
forward pass of ``synapse_models``, the model code the CPU lane runs too)
and with the sentence-transformers vectors shipped with the plugin. Exit
status: 0 when every cosine is at least :data:`FLOOR`, 1 when one is lower or
the worker failed, 2 when it cannot run on this machine.

``--simulated`` runs the same flow with the simulated device, which executes
the generated programs in the numpy MIL interpreter (fp16).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from synapse_core.plugin import LaneLocked
from synapse_models.errors import ModelFilesError

from .availability import probe
from .lanelock import RuntimeDirError, acquire
from .transport import ENV_LANE_FD, ENV_LANE_LOCK, LANE, UNSET_ENV

FLOOR = 0.999
BUCKETS = (32, 64, 128, 256)
EXIT_PASS, EXIT_FAIL, EXIT_CANNOT_RUN = 0, 1, 2
WORKER_TIMEOUT_S = 900
Echo = Callable[[str], None]


def reference_items() -> list[dict[str, Any]]:
    """The reference texts and their sentence-transformers vectors (shipped data)."""
    data = resources.files("synapse_ane_direct").joinpath("data/minilm-reference.json")
    items: list[dict[str, Any]] = json.loads(data.read_text("utf-8"))["items"]
    return items


@attrs.frozen
class Baseline:
    """What the device's vectors are compared with."""

    name: str
    embed: Callable[[list[list[int]]], Any]  # positions (specials included) -> [n, dims]


def reference_baseline() -> Baseline:
    """The numpy forward pass of the wheel's MiniLM (``synapse_models``, the
    CPU lane's model code), on one thread."""
    from synapse_models.model import load

    model = load(runtime="numpy", threads=1)
    before, after = len(model.framing.before), len(model.framing.after)

    def embed(positions: list[list[int]]) -> Any:
        # Model.embed frames the ids itself: give it the ids between the specials.
        framing = model.framing
        for seq in positions:
            if tuple(seq[:before]) != framing.before or tuple(seq[len(seq) - after :]) != (
                framing.after
            ):
                raise ValueError(f"positions {seq[:8]}... are not framed as {framing}")
        return model.embed([seq[before : len(seq) - after] for seq in positions])

    name = f"the numpy forward pass of {model.files.name} ({model.sha256[:8]}, synapse_models)"
    return Baseline(name, embed)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    import numpy as np

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def run_selftest(
    *,
    simulated: bool,
    texts: int | None,
    buckets: Sequence[int] = BUCKETS,
    runtime_dir: Path | None = None,
    echo: Echo = print,
    baseline: Callable[[], Baseline] = reference_baseline,
    probe_: Callable[[], str] = probe,
) -> int:
    device = "simulated" if simulated else "hardware"
    if not simulated:
        reason = probe_()
        if reason:
            echo(f"synapse ane selftest cannot run on this machine: {reason}")
            echo("(`synapse ane selftest --simulated` runs the same flow in the MIL interpreter)")
            return EXIT_CANNOT_RUN
    try:
        lock = acquire(LANE.lane_id, runtime_dir)
    except (LaneLocked, RuntimeDirError) as exc:
        echo(f"synapse ane selftest cannot take the lane lock: {exc}")
        return EXIT_CANNOT_RUN
    with lock:
        env = {k: v for k, v in os.environ.items() if k not in UNSET_ENV}
        env[ENV_LANE_FD], env[ENV_LANE_LOCK] = str(lock.fd), str(lock.path)
        spec = json.dumps({"device": device, "buckets": list(buckets), "texts": texts})
        echo(f"lane {LANE.lane_id} locked ({lock.path}); starting the {device} worker")
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "synapse_ane_direct.selftest_worker", "--spec", spec],
                env=env,
                pass_fds=lock.pass_fds,
                capture_output=True,
                text=True,
                timeout=WORKER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            echo(f"FAIL: the worker did not finish within {WORKER_TIMEOUT_S} s")
            return EXIT_FAIL
    lines = proc.stdout.strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
    except ValueError:
        result = {}
    if "error" in result:
        echo(f"synapse ane selftest cannot run on this machine: {result['error']}")
        return EXIT_CANNOT_RUN
    if proc.returncode != 0 or not result:
        why = proc.stderr.strip()[-2000:] or "no output"
        echo(f"FAIL: the worker exited with status {proc.returncode}: {why}")
        return EXIT_FAIL
    try:
        base = baseline()
    except ModelFilesError as exc:
        echo(f"synapse ane selftest cannot load its baseline: {exc}")
        return EXIT_CANNOT_RUN
    return _report(result, base, echo)


def _report(result: dict[str, Any], base: Baseline, echo: Echo) -> int:
    items = reference_items()
    ids: list[list[int]] = result["ids"]
    used = sorted({int(i) for b in result["buckets"] for i in b["vectors"]})
    expected = dict(zip(used, base.embed([ids[i] for i in used]), strict=True))
    echo(f"device: {result['device']} ({result['identity']})")
    echo(
        f"worker: TMPDIR {'SET (wrong)' if result['tmpdir_set'] else 'unset'}, lane lock "
        f"{'inherited' if result['lane_lock_inherited'] else 'NOT inherited'}"
    )
    echo(f"compared with: {base.name}; and the shipped sentence-transformers vectors")
    echo(
        f"{'bucket':>6} {'compile_s':>10} {'p50_ms':>8} {'texts':>5} "
        f"{'min_cos':>9} {'min_cos_st':>10}"
    )
    worst = 1.0
    for b in result["buckets"]:
        cos = [_cosine(v, expected[int(i)]) for i, v in b["vectors"].items()]
        cos_st = [_cosine(v, items[int(i)]["vector"]) for i, v in b["vectors"].items()]
        p50 = statistics.median(b["latency_ms"]) if b["latency_ms"] else float("nan")
        low, low_st = min(cos, default=float("nan")), min(cos_st, default=float("nan"))
        worst = min(worst, low) if cos else worst
        echo(
            f"{b['bucket']:>6} {b['compile_s']:>10.3f} {p50:>8.2f} {len(cos):>5} "
            f"{low:>9.6f} {low_st:>10.6f}"
        )
    if result["tmpdir_set"] or not result["lane_lock_inherited"]:
        echo("FAIL: the worker did not run as a host's worker runs (see the worker line)")
        return EXIT_FAIL
    if worst < FLOOR:
        echo(f"FAIL: lowest cosine {worst:.6f} (floor {FLOOR})")
        return EXIT_FAIL
    echo(f"PASS: every bucket's vectors have cosine >= {FLOOR} with the baseline")
    return EXIT_PASS
