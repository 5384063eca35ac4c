"""docs/cpu-lane.md's "Bring your model" walk-through, replayed: its catalog
is written as the page shows it, and each command's output starts with the
lines the page shows."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from synapse_core.cli import make_cli

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "cpu-lane.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def walk_through() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Bring your model\n", 1)[1].split("\n## ", 1)[0]
    return [(m[1], m[2]) for m in FENCE.finditer(section)]


def commands(console: str) -> list[tuple[list[str], list[str]]]:
    """Each ``$ synapse ...`` line's arguments and the output lines shown under it."""
    shown: list[tuple[list[str], list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            words = shlex.split(line[2:])
            assert words[0] == "synapse", line
            shown.append((words[1:], []))
        else:
            shown[-1][1].append(line)
    return shown


def test_the_walk_through_replays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    blocks = walk_through()
    (catalog,) = [code for lang, code in blocks if lang == "toml"]
    assert catalog.startswith("# my-models.toml\n")
    models = tomllib.loads(catalog)["models"]
    assert {m["task"] for m in models} == {"embed", "rerank"}
    # The page's folders are relative to the repository's root.
    for folder in {m["options"]["model_dir"] for m in models}:
        assert (ROOT / folder / "config.json").is_file(), folder
        catalog = catalog.replace(f'"{folder}"', f'"{ROOT / folder}"')
    (tmp_path / "my-models.toml").write_text(catalog, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    env = {
        "SYNAPSE_PLUGINS": "cpu",
        "SYNAPSE_CATALOG": None,
        "SYNAPSE_DEBUG": None,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # where the ONNX graph is built
    }
    replayed = [c for lang, code in blocks if lang == "console" for c in commands(code)]
    assert [args[0] for args, _ in replayed] == ["catalog", "embed", "rerank"]
    for args, shown in replayed:
        result = CliRunner().invoke(make_cli(), args, env=env)
        assert result.exit_code == 0, (args, result.stderr)
        lines = result.stdout.splitlines()
        assert lines[: len(shown)] == shown, args
