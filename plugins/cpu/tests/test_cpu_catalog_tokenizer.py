"""A folder's ``tokenizer.json`` is checked when the catalog is read: a
malformed one makes its model unavailable with a reason naming the file (not
a 500 on every request), and the check is remembered per file size and
modification time, so listing a catalog stays cheap."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import synapse_core as synapse
import synapse_cpu.plugin
import synapse_cpu.transport
from synapse_core.testing import host_config, model_entry
from synapse_models import files
from synapse_models import tokenizer as tokenizer_module
from synapse_models.testing import TINY

pytestmark = pytest.mark.anyio

FOLDER = "bert-cls"  # a tiny embedder: loads in milliseconds
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def entry(name: str, folder: Path) -> dict[str, Any]:
    return model_entry(name, task="embed", transport="cpu", ceiling=128, model_dir=str(folder))


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    """A copy of a tiny folder whose ``tokenizer.json`` is cut short (not JSON)."""
    root = tmp_path / "broken"
    shutil.copytree(TINY / FOLDER, root)
    path = root / files.TOKENIZER
    path.write_bytes(path.read_bytes()[:100])
    return root


def availability(folder: Path) -> synapse_cpu.transport.Availability:
    transport = synapse_cpu.transport.CpuTransport()
    return transport.model_availability(host_config(entry("m", folder)).models[0])


def test_a_malformed_tokenizer_makes_the_model_unavailable_naming_the_file(broken: Path) -> None:
    found = availability(broken)
    assert not found.available
    assert f"{broken / files.TOKENIZER}: is not a Hugging Face tokenizers file" in found.reason


def test_the_check_is_remembered_until_the_file_changes(
    broken: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    real = tokenizer_module.load_tokenizer

    def counted(path: Path) -> object:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(tokenizer_module, "load_tokenizer", counted)
    assert not availability(broken).available
    assert not availability(broken).available
    assert len(reads) == 1  # listed twice, read once
    path = broken / files.TOKENIZER
    shutil.copyfile(TINY / FOLDER / files.TOKENIZER, path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert availability(broken).available  # repaired: read again
    assert len(reads) == 2


@pytest.mark.subprocess
async def test_a_request_to_it_is_refused_as_unavailable_and_others_serve(broken: Path) -> None:
    good = entry("good", TINY / FOLDER)
    plugins = [synapse_cpu.plugin]
    async with synapse.open_host(config(entry("broken", broken), good), plugins=plugins) as h:
        assert h.catalog.entries["broken"].problem
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("broken", ["hello"], deadline=synapse.Deadline.after(60.0))
        assert len((await h.embed("good", ["hello"])).vectors) == 1
    assert refused.value.code == "transport-unavailable"
    assert str(broken / files.TOKENIZER) in refused.value.message
