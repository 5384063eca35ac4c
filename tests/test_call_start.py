"""A call starts in one place: ``starting.py`` (``Starts``). No other module
of the core takes a head start, makes a coalescer or starts a call's
detached task, and docs/architecture.md's module table lists every module
of the core (the layout is the architecture: a module it does not name is
one a reader cannot find)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import synapse_core

CORE = Path(synapse_core.__file__).parent
DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def starts_in(source: str) -> list[str]:
    """The calls in ``source`` that start a call: ``x.try_begin(...)``,
    ``Coalescer(...)``, and a task started on a runner's ``run``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = ast.unparse(node.args[0]) if node.args else ""
        if name in ("try_begin", "Coalescer") or (
            name == "start_soon" and first.endswith("runner.run")
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_each_way_a_call_starts() -> None:
    source = (
        "head = runner.try_begin(plan, deadline, sup, worker)\n"
        "c = Coalescer(self, model, budget, 1)\n"
        "self._tg.start_soon(runner.run, call, sup, worker)\n"
        "tg.start_soon(self._idle.run, retired)\n"
    )
    assert [line.split(":")[0] for line in starts_in(source)] == ["line 1", "line 2", "line 3"]


def test_only_the_start_route_starts_calls() -> None:
    found = {
        str(path.relative_to(CORE)): hits
        for path in sorted(CORE.rglob("*.py"))
        if path.name != "starting.py" and (hits := starts_in(path.read_text()))
    }
    # serving.py defines try_begin and run; it calls neither on a runner.
    assert found == {}, f"calls started outside synapse_core/starting.py: {found}"


def test_the_architecture_doc_lists_every_core_module() -> None:
    named = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))
    missing = [
        str(path.relative_to(CORE))
        for path in sorted(CORE.glob("*.py")) + sorted((CORE / "residency").glob("*.py"))
        if path.name != "__init__.py"
        and path.name not in named
        and str(path.relative_to(CORE)) not in named
    ]
    assert missing == [], f"add a row for each to docs/architecture.md's module table: {missing}"
