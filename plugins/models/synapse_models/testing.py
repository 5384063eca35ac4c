"""Test support for every lane that loads models: MiniLM's reference
vectors, the shipped model loaded on each runtime, the tiny reference
models' folder, and the checks of vectors against a reference.

Import the fixtures into a ``conftest.py`` (``from synapse_models.testing
import *``). Models load once per test session (each load hashes and reads
90 MB). Built graphs go to a temporary cache folder, never the user's. The
reference data lives in this distribution's ``tests/data`` (a checkout's;
the nox sessions install it editable).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from . import files
from . import model as runtime

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
#: the tiny random models of each family, with their references
TINY = DATA / "tiny-models"
REFERENCE = DATA / "minilm-reference.json"
#: the reference's tolerances (vectors computed by sentence-transformers, float32)
MIN_COSINE = 0.99999
MAX_ABS = 1e-5


@pytest.fixture(scope="session")
def reference() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(REFERENCE.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="session")
def reference_vectors(reference: dict[str, Any]) -> np.ndarray[Any, Any]:
    return np.array([item["vector"] for item in reference["items"]], dtype=np.float32)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    root = files.wheel_model_dir()
    if root is None:
        pytest.fail(f"the model wheel is not installed: {files.INSTALL_HINT}")
    return root


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(autouse=True)
def graph_cache_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """Workers started by tests (default options) cache graphs in a test folder."""
    home = tmp_path_factory.getbasetemp() / "xdg-cache"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    return home


@pytest.fixture(scope="session", params=runtime.RUNTIMES)
def model(request: pytest.FixtureRequest) -> runtime.Model:
    """The shipped model on each backend (onnxruntime where it is installed)."""
    loaded: runtime.Model = request.getfixturevalue(f"{request.param}_model")
    return loaded


@pytest.fixture(scope="session")
def numpy_model() -> runtime.Model:
    return runtime.load(runtime="numpy", threads=1)


@pytest.fixture(scope="session")
def onnxruntime_model(onnx_cache: Path) -> runtime.Model:
    return runtime.load(runtime="onnxruntime", cache_dir=str(onnx_cache))


@pytest.fixture(scope="session")
def int8_model(onnx_cache: Path) -> runtime.Model:
    return runtime.load(quantize="int8", cache_dir=str(onnx_cache))


@pytest.fixture
def model_copy(tmp_path: Path, model_dir: Path) -> Path:
    """A copy of the model folder to break: links, except files a test replaces."""
    root = tmp_path / "model"
    shutil.copytree(model_dir, root, copy_function=_link)
    return root


def _link(src: str, dst: str) -> None:
    Path(dst).symlink_to(src)


Check = Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any]], None]


@pytest.fixture(scope="session")
def matches_reference() -> Check:
    """Asserts vectors match expected ones within the reference's tolerances."""
    return assert_matches_reference


def cosines(vectors: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (vectors * expected).sum(axis=1) / (  # type: ignore[no-any-return]
        np.linalg.norm(vectors, axis=1) * np.linalg.norm(expected, axis=1)
    )


def assert_matches_reference(vectors: np.ndarray[Any, Any], expected: np.ndarray[Any, Any]) -> None:
    found = cosines(vectors, expected)
    worst = np.abs(vectors - expected).max(axis=1)
    assert found.min() >= MIN_COSINE, f"cosines {found}"
    assert worst.max() <= MAX_ABS, f"max abs differences {worst}"


@pytest.fixture(scope="session")
def close_to_reference() -> Callable[[np.ndarray[Any, Any], np.ndarray[Any, Any], float], None]:
    """Asserts a lossy conversion's vectors are within a cosine tolerance of expected ones."""
    return assert_close_to_reference


#: the least an int8 graph's reported worst cosine may be (the benchmark's target)
INT8_FLOOR = 0.98


def assert_close_to_reference(
    vectors: np.ndarray[Any, Any], expected: np.ndarray[Any, Any], tolerance: float
) -> None:
    """A lossy conversion's vectors: each within ``tolerance`` (a cosine) of the reference."""
    found = cosines(vectors, expected)
    assert found.min() >= tolerance >= INT8_FLOOR, f"cosines {found}, tolerance {tolerance}"
