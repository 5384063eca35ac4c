"""Every hook is documented well enough for a transport author to work alone."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from synapse_core import hookspecs

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-transport.md"
HOOKS = [
    (name, fn)
    for name, fn in vars(hookspecs).items()
    if name.startswith("synapse_") and inspect.isfunction(fn)
]


def test_there_are_hooks_for_every_family() -> None:
    names = {name for name, _ in HOOKS}
    assert {
        "synapse_register_transports",
        "synapse_admission_cost",
        "synapse_lane_full",
        "synapse_select_bucket",
        "synapse_observe",
        "synapse_register_commands",
    } <= names


@pytest.mark.parametrize(("name", "fn"), HOOKS, ids=[name for name, _ in HOOKS])
def test_hookspec_documents_each_argument_and_its_calling(name: str, fn: object) -> None:
    doc = inspect.getdoc(fn) or ""
    flat = " ".join(doc.split())
    assert len(doc.splitlines()) >= 4, f"{name} needs a real docstring"
    for arg in inspect.signature(fn).parameters:  # type: ignore[arg-type]
        assert f":param {arg}:" in doc, f"{name} does not document {arg}"
    firstresult = fn.synapse_spec["firstresult"]  # type: ignore[attr-defined]
    if firstresult:
        assert "first non-``None`` result" in flat, f"{name} must say it stops at first result"


@pytest.mark.parametrize(("name", "fn"), HOOKS, ids=[name for name, _ in HOOKS])
def test_hook_appears_in_the_transport_guide_with_its_arguments(name: str, fn: object) -> None:
    args = ", ".join(inspect.signature(fn).parameters)  # type: ignore[arg-type]
    text = DOC.read_text(encoding="utf-8")
    assert re.search(rf"{name}\({re.escape(args)}", text) or f"def {name}(" in text, (
        f"docs/writing-a-transport.md does not show {name}({args})"
    )
