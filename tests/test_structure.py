"""The seam between the host and its supervisors: only ``residency/`` assigns
to supervisor or worker state; everyone else goes through their methods."""

from __future__ import annotations

import ast
from pathlib import Path

import synapse_core

CORE = Path(synapse_core.__file__).parent
#: names the core gives supervisors and workers (records of ``residency.worker``)
HOLDERS = {"sup", "supervisor", "worker", "victim", "w"}
#: supervisor attributes whose contents are supervisor state
STATE = {"workers", "lane", "admissions"}


def _root(node: ast.expr) -> tuple[str | None, list[str]]:
    """The name an attribute/subscript chain starts from, and its attributes."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            attrs.append(node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs[::-1]


def _targets(tree: ast.AST) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            out.extend(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            out.append(node.target)
        elif isinstance(node, ast.Delete):
            out.extend(node.targets)
    return [t for t in out if isinstance(t, ast.Attribute | ast.Subscript)]


def mutations(source: str) -> list[str]:
    """Assignments (or deletions) of supervisor/worker state in ``source``."""
    found = []
    for target in _targets(ast.parse(source)):
        root, attrs = _root(target)
        if root in HOLDERS or any(a in STATE for a in attrs):
            found.append(f"line {target.lineno}: {ast.unparse(target)}")
    return found


def _sees_residency(source: str) -> bool:
    """Modules that can hold a supervisor or a residency worker."""
    return ".residency." in source or "synapse_core.residency" in source


def test_the_scan_finds_what_it_looks_for() -> None:
    source = (
        "sup.workers[w.worker_id] = w\n"
        "del sup.workers[key]\n"
        "self.supervisors[k].lane.session = None\n"
        "worker.selection = s\n"
        "worker.inflight += 1\n"
        "self.supervisors[k] = sup\n"  # the host's own table: allowed
    )
    assert len(mutations(source)) == 5


def test_nothing_outside_residency_assigns_supervisor_or_worker_state() -> None:
    offenders = {}
    for path in CORE.rglob("*.py"):
        if "residency" in path.relative_to(CORE).parts:
            continue
        source = path.read_text()
        if _sees_residency(source) and (found := mutations(source)):
            offenders[str(path.relative_to(CORE))] = found
    assert offenders == {}
