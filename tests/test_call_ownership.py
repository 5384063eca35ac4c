"""Who may change a call and the backlog: only ``call.py`` assigns to a
``Call`` (every other module uses its methods), and only ``Backlog``'s own
``enter`` and ``leave`` change its ``waiting`` count.

The scan reads every module of the core and of the plugins. A value counts
as a call when it is annotated as one (``Call``, ``Coalesced``, ``Call |
None``), when its name says so (``call``, ``caller``, ``*_call``), or when it
is ``self`` in a class deriving from ``Call``; the attributes watched are the
fields of ``Call`` and ``Coalesced``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attrs

import synapse_core
from synapse_core.call import Call, Coalesced

CORE = Path(synapse_core.__file__).parent
PLUGINS = CORE.parent / "plugins"
FIELDS = {f.name for f in attrs.fields(Coalesced)} | {f.name for f in attrs.fields(Call)}
CALL_TYPES = {"Call", "Coalesced"}


def _modules() -> list[Path]:
    packages = [CORE, *sorted(PLUGINS.glob("*/synapse_*"))]
    return [path for package in packages for path in sorted(package.rglob("*.py"))]


def _is_call_annotation(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "Call | None"
        node = ast.parse(node.value, mode="eval").body
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return bool(names & CALL_TYPES)


def _named_as_call(name: str) -> bool:
    return name in ("call", "caller") or name.endswith("_call") or name.endswith("_caller")


class _Scan(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[str] = []
        self.typed: list[set[str]] = [set()]  # names annotated as calls, per function
        self.call_class: list[bool] = [False]  # inside a class deriving from Call
        self.backlog_class: list[bool] = [False]

    # scopes
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
        self.call_class.append(bool(bases & CALL_TYPES) or node.name in CALL_TYPES)
        self.backlog_class.append(node.name == "Backlog")
        self.generic_visit(node)
        self.call_class.pop()
        self.backlog_class.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        typed = {a.arg for a in args if _is_call_annotation(a.annotation)}
        self.typed.append(self.typed[-1] | typed)
        self.generic_visit(node)
        self.typed.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and _is_call_annotation(node.annotation):
            self.typed[-1].add(node.target.id)
        self._target(node.target, node)
        self.generic_visit(node)

    # what is looked for
    def _is_call(self, node: ast.expr) -> bool:
        if not isinstance(node, ast.Name):
            return False
        if node.id == "self":
            return self.call_class[-1]
        return node.id in self.typed[-1] or _named_as_call(node.id)

    def _target(self, target: ast.expr, at: ast.AST) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._target(element, at)
            return
        node = target
        while isinstance(node, ast.Subscript):  # call.rows[i] = ... changes the call too
            node = node.value
        if isinstance(node, ast.Attribute):
            if node.attr in FIELDS and self._is_call(node.value):
                self.found.append(f"line {at.lineno}: {ast.unparse(node)} (a Call's field)")
            if node.attr == "waiting" and not self.backlog_class[-1]:
                self.found.append(f"line {at.lineno}: {ast.unparse(node)} (Backlog.waiting)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._target(target, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ("setattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            owner, name = node.args[0], node.args[1].value
            if name in FIELDS and self._is_call(owner):
                self.found.append(f"line {node.lineno}: {ast.unparse(node)} (a Call's field)")
            if name == "waiting" and not self.backlog_class[-1]:
                self.found.append(f"line {node.lineno}: {ast.unparse(node)} (Backlog.waiting)")
        self.generic_visit(node)


def changes(source: str, *, owner: bool = False) -> list[str]:
    """Assignments in ``source`` to a call's fields (unless it is ``owner``,
    ``call.py``) or to a backlog's count outside ``Backlog``'s methods."""
    scan = _Scan()
    scan.visit(ast.parse(source))
    if owner:
        return [f for f in scan.found if "Backlog.waiting" in f]
    return scan.found


def test_the_scan_finds_what_it_looks_for() -> None:
    source = (
        "def f(call, x: Call, y: 'Coalesced | None', other_call, z):\n"
        "    call.permit = True\n"
        "    x.rows[0] = r\n"
        "    y.gone += 1\n"
        "    other_call.lease, n = None, 1\n"
        "    setattr(call, 'begun', None)\n"
        "    del call.on_end\n"
        "    z.permit = True\n"  # not a call: left alone
        "    call.plan.items = ()\n"  # the plan's, not the call's
        "class Mine(Call):\n"
        "    def m(self):\n"
        "        self.abandoned = True\n"
        "class Other:\n"
        "    def m(self):\n"
        "        self.abandoned = True\n"  # not a call
        "def g(backlog):\n"
        "    backlog.waiting += 1\n"
        "    self.backlog.waiting -= 1\n"
        "    setattr(backlog, 'waiting', 0)\n"
        "class Backlog:\n"
        "    def enter(self):\n"
        "        self.waiting += 1\n"  # its own method
    )
    found = changes(source)
    assert [line.split(":")[0] for line in found] == [
        "line 2",
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "line 7",
        "line 12",
        "line 17",
        "line 18",
        "line 19",
    ], found
    # call.py may change calls, never the backlog.
    assert [f.split(":")[0] for f in changes(source, owner=True)] == [
        "line 17",
        "line 18",
        "line 19",
    ]


def test_only_call_py_changes_a_call_and_only_backlog_its_count() -> None:
    found = {}
    modules = _modules()
    assert CORE / "call.py" in modules and CORE / "serving.py" in modules
    for path in modules:
        problems = changes(path.read_text(), owner=path == CORE / "call.py")
        if problems:
            found[str(path.relative_to(CORE.parent))] = problems
    assert found == {}


class _Done:
    def __init__(self, done: bool) -> None:
        self.done = done

    def is_set(self) -> bool:
        return self.done

    def set(self) -> None:
        self.done = True

    async def wait(self) -> None:  # pragma: no cover - never awaited here
        raise AssertionError


def test_the_invariant_checker_finds_each_broken_invariant() -> None:
    from synapse_core.deadline import Deadline
    from synapse_core.plan import Item, Plan
    from synapse_core.tokenizer import BasicTokenizer

    from .call_invariants import call_problems

    plan = Plan("m", "embed", (Item(0, "a", 1, 3, [1]),), BasicTokenizer())
    lease, begun, guard = object(), (object(), object()), object()

    def call(done: bool = False, **held: object) -> Call:
        return Call(plan, Deadline.never(), [None], _Done(done), **held)  # type: ignore[arg-type]

    assert call_problems(call()) == []
    assert call_problems(call(permit=1, guard=guard, lease=lease, begun=begun)) == []
    broken = {
        "holds a permit and is queued": call(permit=1, queued=True),
        "entered the guard without a permit": call(guard=guard),
        "holds a lease without guard and permit": call(permit=1, lease=lease),
        "request under way without lease and guard": call(permit=1, guard=guard, begun=begun),
        "ended holding permit": call(done=True, permit=1),
        "ended holding place in line": call(done=True, queued=True),
    }
    for what, bad in broken.items():
        problems = call_problems(bad)
        assert any(what in problem for problem in problems), (what, problems)
    callers = [call(), call()]
    shared = Coalesced.of(callers, _Done(False))
    for caller in callers:
        shared.left(caller)
    assert call_problems(shared) == []  # the last to leave abandons it
    stuck = Coalesced(plan, Deadline.never(), [None], _Done(False), callers=callers, gone=2)
    assert any("not abandoned" in p for p in call_problems(stuck))
