"""An unwritable graph cache does not take a CPU worker down: it builds its
graph in a temporary folder and serves (``XDG_CACHE_HOME=/sys/kernel synapse
embed ...`` crashed the worker with a PermissionError and a vague 503).

Tests run as root, where a read-only mode does not stop writes: the cache
folder here lies under a regular file, so it cannot be made."""

from __future__ import annotations

from pathlib import Path

import pytest

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.testing import host_config, model_entry
from synapse_models.testing import TINY

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


@asyncio_only
@pytest.mark.parametrize("how", ["cache_dir", "XDG_CACHE_HOME"])
async def test_a_worker_with_an_unwritable_graph_cache_serves_from_a_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    pytest.importorskip("onnxruntime")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # the worker's temporary folder
    options: dict[str, str] = {"model_dir": str(TINY / "bert-cls"), "runtime": "onnxruntime"}
    if how == "cache_dir":
        options["cache_dir"] = str(blocker / "cache")
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))
    entry = model_entry("m", task="embed", transport="cpu", ceiling=128, **options)
    config = host_config(entry, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)
    async with synapse.open_host(config, plugins=[synapse_cpu.plugin]) as h:
        result = await h.embed("m", ["hello"], deadline=synapse.Deadline.after(60.0))
    assert len(result.vectors) == 1
    # The worker built its graph in the temporary folder.
    assert list(temporary.glob("synapse-onnx-*/onnxruntime-*/*.onnx"))
