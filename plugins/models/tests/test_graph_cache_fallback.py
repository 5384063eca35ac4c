"""A graph cache folder that cannot be written: the onnxruntime model loads
with its graph in a temporary folder instead, and says so once, naming the
folder it could not write; where no temporary folder can be written either,
the load is refused naming both.

Tests run as root, where a read-only mode does not stop writes: the
unwritable folders here lie under a regular file (``mkdir`` fails) or in
``/proc``."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np
import pytest

from synapse_models import model as runtime
from synapse_models import onnx_file
from synapse_models.errors import ModelFilesError
from synapse_models.testing import TINY

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

FOLDER = str(TINY / "bert-cls")


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the fallback goes under (not the machine's)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    onnx_file.fallback_notice.cache_clear()
    return root


def unwritable(tmp_path: Path) -> Path:
    """A folder that cannot be made, whoever runs the test: under a regular file."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    return blocker / "cache"


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_an_unwritable_cache_falls_back_to_a_temporary_folder_logged_once(
    tmp_path: Path, temporary: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    cache = unwritable(tmp_path) if where == "under-a-file" else Path("/proc/synapse-cache")
    caplog.set_level(logging.WARNING, logger="synapse_models")
    first = runtime.load(FOLDER, runtime="onnxruntime", cache_dir=str(cache))
    second = runtime.load(FOLDER, runtime="onnxruntime", cache_dir=str(cache))
    assert first.graph is not None and second.graph == first.graph
    assert first.graph.is_relative_to(temporary)
    notices = [r.getMessage() for r in caplog.records if str(cache) in r.getMessage()]
    assert len(notices) == 1, notices  # once per process
    assert str(temporary) in notices[0]
    numpy = runtime.load(FOLDER, runtime="numpy")
    ids = [[5, 6, 7]]
    assert np.abs(first.embed(ids) - numpy.embed(ids)).max() <= 1e-5


def test_the_environments_cache_home_falls_back_too(
    tmp_path: Path, temporary: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(unwritable(tmp_path)))
    loaded = runtime.load(FOLDER, runtime="onnxruntime")
    assert loaded.graph is not None and loaded.graph.is_relative_to(temporary)


def test_with_no_writable_folder_at_all_the_load_is_refused_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = unwritable(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "a-file" / "tmp"))
    onnx_file.fallback_notice.cache_clear()
    with pytest.raises(ModelFilesError) as refused:
        runtime.load(FOLDER, runtime="onnxruntime", cache_dir=str(cache))
    message = str(refused.value)
    assert str(cache) in message and str(tmp_path / "a-file" / "tmp") in message
    assert "options.cache_dir" in message and "XDG_CACHE_HOME" in message


def test_a_writable_cache_is_used_and_nothing_is_logged(
    tmp_path: Path, temporary: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="synapse_models")
    loaded = runtime.load(FOLDER, runtime="onnxruntime", cache_dir=str(tmp_path / "cache"))
    assert loaded.graph is not None and loaded.graph.is_relative_to(tmp_path / "cache")
    assert not caplog.records
    assert not any(temporary.iterdir())
