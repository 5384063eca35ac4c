"""SIGTERM to a one-shot command stops it as Ctrl-C does: the host retires
its workers and confirms their exits before the command exits."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synapse_core.testing import catalog_toml, model_entry, pid_exists

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.skipif(
        importlib.util.find_spec("synapse_mock_transport") is None,
        reason="the synapse-mock-transport plugin is not installed",
    ),
]
HANG_GUARD_S = 30  # turns a hang into a failure; not a timing assertion


def _wait_for(predicate: object, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def _frames(trace: Path) -> list[dict[str, object]]:
    if not trace.exists():
        return []
    return [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]


def test_sigterm_to_a_one_shot_command_retires_and_confirms_the_busy_worker(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    catalog = tmp_path / "c.toml"
    # The worker never answers its first inference and ignores SIGTERM:
    # only a host that stops it on purpose (SIGKILL) gets rid of it.
    hung = model_entry(
        "hung",
        ceiling=64,
        buckets=[16],
        dims=4,
        max_batch=2,
        trace=str(trace),
        faults={"hang_on_infer": 1, "ignore_sigterm": True},
    )
    # The exchange timeout also bounds the worker's hello on a busy machine; the
    # hang is never waited out (SIGTERM comes first), so it can be generous.
    catalog.write_text(
        catalog_toml(hung, exchange_timeout_s=float(HANG_GUARD_S), exit_grace_s=0.5),
        encoding="utf-8",
    )
    env = dict(os.environ, SYNAPSE_PLUGINS="mock", SYNAPSE_CATALOG=str(catalog))
    command = subprocess.Popen(
        [sys.executable, "-m", "synapse_core.cli", "embed", "hung", "hello"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker_pid = 0
    try:
        _wait_for(lambda: any(f["frame"] == "infer" for f in _frames(trace)), "the inference")
        [worker_pid] = {f["pid"] for f in _frames(trace)}  # type: ignore[assignment]
        command.send_signal(signal.SIGTERM)
        command.wait(timeout=HANG_GUARD_S)
        # The command confirmed the worker's exit before it exited itself.
        orphaned = pid_exists(worker_pid)
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
        if worker_pid and pid_exists(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)  # a failed run must not leave it behind
    assert not orphaned
    assert command.returncode == 1
    assert command.stderr is not None
    assert command.stderr.read().strip().splitlines()[-1] == "synapse: aborted"
