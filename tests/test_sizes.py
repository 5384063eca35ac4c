"""Small modules and short functions in synapse_core.

No module is over ``MAX_MODULE_LINES`` lines and no function over
``MAX_FUNCTION_LINES`` (its decorators, signature, docstring and body) unless
it says at its top why: a docstring or a comment, just above the function or
before its first statement, that starts with ``Long because``::

    def serve(...) -> None:
        # Long because the steps share the reply's state; split, each would
        # take it all as arguments.
        ...
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import synapse_core

CORE = Path(synapse_core.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MARKER = "Long because"

#: Modules not held to these sizes (none: a module that outgrows them is split).
EXEMPT: set[str] = set()


def _start(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def _says_why(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """Whether the function states at its top why it is long."""
    if MARKER in (ast.get_docstring(node) or ""):
        return True
    body = node.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:] or body  # past the docstring
    top = lines[node.lineno - 1 : body[0].lineno - 1]  # signature to first statement
    above = []
    for line in reversed(lines[: _start(node) - 1]):  # the comment block just above
        if not line.strip().startswith("#"):
            break
        above.append(line)
    return any(line.strip().startswith(f"# {MARKER}") for line in top + above)


def long_functions(source: str) -> list[str]:
    """Functions of ``source`` over the limit that do not say why."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - _start(node) + 1
            if length > MAX_FUNCTION_LINES and not _says_why(node, lines):
                found.append(f"{node.name} (line {node.lineno}): {length} lines")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if str(p.relative_to(CORE)) not in EXEMPT)


def _function(name: str, body_lines: int, top: str = "", above: str = "") -> str:
    body = "".join(f"    x = {i}\n" for i in range(body_lines))
    return f"{above}@decorator\ndef {name}(\n    a: int,\n) -> None:\n{top}{body}"


def test_the_function_scan_finds_long_functions_and_reads_reasons() -> None:
    fits = MAX_FUNCTION_LINES - 4  # decorator, signature over three lines
    source = "\n".join(
        [
            _function("fits", fits),
            _function("too_long", fits + 1),
            "class C:\n" + textwrap.indent(_function("in_a_class", fits + 1), "    "),
            _function("a_comment_at_top", fits, top="    # Long because it must be.\n"),
            _function("a_docstring", fits, top='    """Long because it must be."""\n'),
            _function("after_the_docstring", fits, top='    """Doc."""\n    # Long because.\n'),
            _function("a_comment_above", fits + 1, above="# Long because it must be.\n"),
            _function("a_docstring_only", fits, top='    """Doc, not a reason."""\n'),
            _function("a_comment_below_the_top", fits, top="    y = 0\n    # Long because.\n"),
        ]
    )
    found = {entry.split(" ")[0] for entry in long_functions(source)}
    assert found == {"too_long", "in_a_class", "a_docstring_only", "a_comment_below_the_top"}


def test_the_exempt_modules_exist() -> None:
    # A stale entry would exempt nothing, silently.
    assert all((CORE / name).is_file() for name in EXEMPT)


def test_no_module_is_over_the_limit() -> None:
    sizes = {str(p.relative_to(CORE)): len(p.read_text().splitlines()) for p in _modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_no_function_is_over_the_limit_without_a_reason() -> None:
    found = {str(p.relative_to(CORE)): long_functions(p.read_text()) for p in _modules()}
    assert {name: f for name, f in found.items() if f} == {}
