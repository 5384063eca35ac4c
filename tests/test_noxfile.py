"""The noxfile's reading of ``nox -s plugin -- PATH``: which argument is a
plugin to test and which is left to pytest, and the check that an outside
distribution registers a plugin at all."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def noxfile() -> Iterator[ModuleType]:
    """The noxfile, imported once (nox registers its sessions at import)."""
    pytest.importorskip("nox")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT))
        # What importing it sets and reads, kept from pytest's own process.
        patch.setenv("UV_PYTHON_DOWNLOADS", "never")
        patch.setattr(sys, "argv", ["nox"])
        import noxfile as module

        yield module


def targets(
    noxfile: ModuleType, monkeypatch: pytest.MonkeyPatch, start: Path, *args: str
) -> list[str]:
    monkeypatch.setattr(sys, "argv", ["nox", "-s", "plugin", "--", *args])
    monkeypatch.setenv("PWD", str(start))
    found: list[str] = noxfile._outside_plugins()
    return found


def test_a_plugin_path_is_a_target_and_a_path_holding_none_is_one_too(
    noxfile: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plugin = tmp_path / "mine"
    plugin.mkdir()
    (plugin / "pyproject.toml").write_text("[project]\nname = 'mine'\n", encoding="utf-8")
    assert targets(noxfile, monkeypatch, tmp_path, "mine", "-k", "x") == ["mine"]
    # Kept, so that its session fails saying what is wrong with it.
    assert targets(noxfile, monkeypatch, tmp_path, "absent") == ["absent"]
    assert targets(noxfile, monkeypatch, ROOT, str(tmp_path)) == [str(tmp_path)]


def test_pytest_arguments_for_this_repositorys_sessions_are_not_targets(
    noxfile: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert targets(noxfile, monkeypatch, ROOT, "-k", "conformance") == []
    assert targets(noxfile, monkeypatch, ROOT, "plugins/cpu/tests") == []
    assert targets(noxfile, monkeypatch, ROOT, "tests/test_noxfile.py") == []
    assert targets(noxfile, monkeypatch, ROOT, "plugins/cpu/tests/test_x.py::test_y") == []
    example = "docs/examples/hash_transport"  # a distribution of its own
    assert targets(noxfile, monkeypatch, ROOT, example) == [example]


def test_a_distribution_without_a_synapse_entry_point_is_told_so(noxfile: ModuleType) -> None:
    def check(name: str) -> subprocess.CompletedProcess[str]:
        script = noxfile.REGISTERS_A_PLUGIN
        return subprocess.run(
            [sys.executable, "-c", script, name], capture_output=True, text=True, check=False
        )

    core = check("synapse-core")  # a console script, and no plugin of its own
    assert core.returncode == 1
    assert core.stderr.startswith("synapse-core registers no plugin: Synapse loads the entry")
    try:
        md.distribution("synapse-mock-transport")
    except md.PackageNotFoundError:
        return  # the core alone (nox's core session)
    assert check("synapse-mock-transport").returncode == 0
