"""docs/writing-a-transport.md keeps working: its example package is built from
the page's code blocks, imported, and its tests run against real workers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from synapse_core.plugin import WorkerOptions, parse_options

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing-a-transport.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
#: a block that is a file of the example starts with ``# path/of/the/file``
FILE_HEADER = re.compile(r"^# ([\w/.-]+\.(?:py|toml))$")


def blocks() -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in FENCE.finditer(DOC.read_text(encoding="utf-8"))]


def example_files() -> dict[str, str]:
    files = {}
    for _, code in blocks():
        header = FILE_HEADER.match(code.splitlines()[0]) if code.strip() else None
        if header:
            files[header[1]] = code
    return files


def test_the_page_holds_the_whole_example() -> None:
    assert set(example_files()) == {
        "pyproject.toml",
        "synapse_hello_transport/options.py",
        "synapse_hello_transport/worker.py",
        "synapse_hello_transport/transport.py",
        "synapse_hello_transport/plugin.py",
        "tests/conftest.py",
        "tests/test_hello_transport.py",
        "tests/test_hello_in_process.py",
    }


def test_every_other_block_parses() -> None:
    for lang, code in blocks():
        if lang == "python":
            compile(code, str(DOC), "exec")
        elif lang == "toml":
            data = tomllib.loads(code)
            faults = data.get("models", {}).get("options", {}).get("faults")
            if faults is not None:  # the fault-knob block is a valid set of knobs
                parse_options({"faults": faults}, WorkerOptions)


@pytest.mark.subprocess
def test_the_example_transport_imports_and_its_tests_pass(tmp_path: Path) -> None:
    for name, code in example_files().items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code, encoding="utf-8")
    (tmp_path / "synapse_hello_transport" / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    modules = ["options", "worker", "transport", "plugin"]
    imports = "; ".join(f"import synapse_hello_transport.{m}" for m in modules)
    subprocess.run([sys.executable, "-c", imports], cwd=tmp_path, env=env, check=True)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "skipped" not in result.stdout
