"""The residency supervisor's shape: collaborators composed by one
``Supervisor``, not a chain of base classes, and a ``Worker`` or ``Lane``
changed only through its own methods."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import synapse_core
from synapse_core.residency.lane import Lane
from synapse_core.residency.worker import Worker

CORE = Path(synapse_core.__file__).parent
RESIDENCY = CORE / "residency"
PLUGINS = Path(__file__).parent.parent / "plugins"
#: methods that change a container in place
MUTATORS = {
    "add",
    "append",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "sort",
    "subtract",
    "update",
}


def _fields(cls: type) -> set[str]:
    return {f.name for f in attrs.fields(cls)} | {"_changed"}


#: record -> (the module that owns it, the fields nobody else may change)
OWNERS = {
    "Worker": ("worker.py", _fields(Worker)),
    "Lane": ("lane.py", _fields(Lane)),
}


def inheriting(source: str, residency_classes: set[str]) -> list[str]:
    """Classes in ``source`` with a base among ``residency_classes``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", None)
                if name in residency_classes:
                    found.append(f"{node.name}({name})")
    return found


def _changed(tree: ast.AST) -> Iterator[ast.Attribute]:
    """Attributes of something other than ``self`` that are assigned, deleted,
    augmented, or changed in place (``x.shapes[s] = u``, ``x.restarts.append(t)``)."""
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            targets = [node.func.value]
        for target in targets:
            while isinstance(target, ast.Subscript):
                target = target.value
            if isinstance(target, ast.Attribute) and not (
                isinstance(target.value, ast.Name) and target.value.id == "self"
            ):
                yield target


def mutations(source: str, fields: set[str]) -> list[str]:
    """Changes to any of ``fields`` of another object in ``source``."""
    return [
        f"line {t.lineno}: {ast.unparse(t)}"
        for t in _changed(ast.parse(source))
        if t.attr in fields
    ]


def _sources() -> Iterator[Path]:
    """The core's modules and every plugin's package (not their tests)."""
    yield from CORE.rglob("*.py")
    for package in sorted(PLUGINS.glob("*/synapse_*")):
        yield from package.rglob("*.py")


def test_the_inheritance_scan_finds_a_chain() -> None:
    source = "class Exits(State): ...\nclass Lifecycle(rooms.Exits): ...\nclass P(Protocol): ...\n"
    assert inheriting(source, {"State", "Exits", "Lifecycle"}) == [
        "Exits(State)",
        "Lifecycle(Exits)",
    ]


def test_no_residency_class_inherits_from_another() -> None:
    modules = sorted(RESIDENCY.glob("*.py"))
    classes = {
        node.name
        for path in modules
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    assert {"Supervisor", "Admission", "Lifecycle", "Exits", "Worker", "Lane"} <= classes
    offenders = {p.name: found for p in modules if (found := inheriting(p.read_text(), classes))}
    assert offenders == {}


def test_the_field_scan_finds_what_it_looks_for() -> None:
    source = (
        "worker.phase = Phase.READY\n"
        "victim.admission_count -= 1\n"
        "del victim.busy_shapes[shape]\n"
        "worker.shapes[shape] = units\n"
        "worker.restarts.append(now)\n"
        "self.lane.session = None\n"
        "self.phase = 1\n"  # a class's own field, not a worker's
        "worker.notify()\n"  # a method: allowed
        "n = worker.generation\n"  # a read: allowed
    )
    assert len(mutations(source, OWNERS["Worker"][1])) == 5
    assert mutations(source, OWNERS["Lane"][1]) == ["line 6: self.lane.session"]


@pytest.mark.parametrize("record", sorted(OWNERS))
def test_only_its_own_module_changes_a_record(record: str) -> None:
    owner, fields = OWNERS[record]
    offenders = {}
    for path in _sources():
        if path == RESIDENCY / owner:
            continue
        if found := mutations(path.read_text(), fields):
            offenders[str(path.relative_to(CORE.parent))] = found
    assert offenders == {}
