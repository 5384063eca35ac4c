"""Real simulated-device worker subprocesses through ``open_host``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from synapse_ane_direct.device import SIMULATED_MODEL
from synapse_ane_direct.lanelock import acquire
from synapse_ane_direct.transport import AneDirectTransport
from synapse_core import HostConfig, LaneLocked, open_host
from synapse_core.plugin import BasicTokenizer
from synapse_core.testing import host_config, model_entry, transport_plugin

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]

DIMS = 32
OPTIONS = {"buckets": [16, 32], "dims": DIMS, "max_batch": 2}
SHORT = ["alpha beta", "gamma", "delta epsilon zeta"]
LONG = " ".join(f"word{i}" for i in range(20))  # 22 positions: the 32 bucket


def _config(trace: Path | None = None) -> HostConfig:
    options = dict(OPTIONS, trace=str(trace)) if trace else OPTIONS
    models = [
        model_entry(name, task=task, transport="ane-direct", package=f"p-{name}", **options)
        for name, task in (("e", "embed"), ("r", "rerank"))
    ]
    return host_config(*models)


def _transport(tmp_path: Path) -> AneDirectTransport:
    return AneDirectTransport("simulated", runtime_dir=tmp_path / "runtime")


def _trace(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_end_to_end_embed_and_rerank_through_worker_subprocesses(tmp_path: Path) -> None:
    tokenizer = BasicTokenizer()
    texts = [SHORT[0], LONG, SHORT[1], SHORT[2]]
    with anyio.fail_after(20):
        async with open_host(_config(), plugins=[transport_plugin(_transport(tmp_path))]) as host:
            embedded = await host.embed("e", texts)
            reranked = await host.rerank("r", "alpha query", SHORT)
            snapshot = host.snapshot()
    assert embedded.identity == "ane-direct:p-e:sim-d32:v1"
    assert len(embedded.vectors) == len(texts)
    for text, vector in zip(texts, embedded.vectors, strict=True):  # input order restored
        assert vector == pytest.approx(
            SIMULATED_MODEL.embed(tokenizer.encode(text), DIMS), abs=1e-6
        )
    query = tokenizer.encode("alpha query")
    expected = SIMULATED_MODEL.rerank(query, [tokenizer.encode(doc) for doc in SHORT], DIMS)
    assert reranked.scores == pytest.approx(expected, abs=1e-6)
    worker = snapshot.worker("e")
    assert (worker.generation, worker.state) == (1, "ready")
    assert sorted((s.bucket, s.batch) for s in worker.shapes) == [(16, 2), (32, 2)]


async def test_worker_runs_without_tmpdir_and_holds_the_inherited_lane_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_tmp = tmp_path / "tmp"
    host_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(host_tmp))  # the host has one; the worker must not
    trace = tmp_path / "trace.jsonl"
    with anyio.fail_after(20):
        plugins = [transport_plugin(_transport(tmp_path))]
        async with open_host(_config(trace), plugins=plugins) as host:
            await host.load("e")
    hello = next(r for r in _trace(trace) if r["frame"] == "hello")
    assert os.environ["TMPDIR"] == str(host_tmp)
    assert hello["tmpdir_set"] is False
    assert hello["lane_lock_inherited"] is True
    assert hello["device"] == "simulated"


async def test_worker_keeps_the_lane_locked_after_the_host_lets_go(tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    with anyio.fail_after(20):
        async with open_host(_config(), plugins=[transport_plugin(_transport(tmp_path))]) as host:
            await host.load("e")
            with pytest.raises(LaneLocked):
                acquire("ane:0", runtime)  # another host
            session = host.supervisors["ane:0"].lane.session
            assert session is not None
            session.close()  # the host's descriptor only; the worker still has its own
            with pytest.raises(LaneLocked):
                acquire("ane:0", runtime)
            assert (await host.embed("e", SHORT[:1])).vectors
    # The worker has exited (the host confirmed it): the lane is free, the file stays.
    with acquire("ane:0", runtime) as lock:
        assert lock.path.exists()
