"""docs/models.md, replayed: its proof against a reference runs as the page
shows it, from the repository's root, and prints the lines the page shows;
its table of the ``Family`` protocol lists every member the protocol has."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from synapse_models.families import Family

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "models.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def section(title: str) -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [(m[1], m[2]) for m in FENCE.finditer(body)]


def test_the_proof_against_a_reference_replays(
    monkeypatch: pytest.MonkeyPatch, onnx_cache: Path
) -> None:
    pytest.importorskip("onnxruntime")
    (code, shown) = (block for _, block in section("Prove it against a reference"))
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XDG_CACHE_HOME", str(onnx_cache))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {})
    assert out.getvalue() == shown


def test_the_protocol_table_lists_every_member() -> None:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("\n## The `Family` protocol\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)", table, re.MULTILINE))
    members = {n for n in vars(Family) if not n.startswith("_")}
    assert listed == members
