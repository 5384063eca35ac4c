"""docs/scale-out.md's "Run it on one machine" runs as written: its commands,
taken from the page like a doctest's, replayed in order in a sandbox of
their own (:mod:`synapse_ray.sandbox`).

The replay follows the page: a ``sh`` block's commands run one after the
other, a ``serve run`` until it serves (then it is left running, as in its
own terminal); a ``text`` block is what the ``serve run`` before it says; the
``python`` block is the client, run against each ``serve run``; the next
``sh`` block after a ``serve run`` comes after its Ctrl-C. Nothing may be
left running at the end.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from synapse_ray import sandbox
from synapse_ray.sandbox import Sandbox, Started

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or "available"),
]

PAGE = Path(__file__).parents[3] / "docs" / "scale-out.md"
SECTION = "## Run it on one machine"
#: a command that serves until Ctrl-C
SERVES = ".venv/bin/serve run "
READY = "Application 'default' is ready"
#: bounds: an answer within three minutes; any other command within two
ANSWER_S = 180.0
COMMAND_S = 120.0
#: Ctrl-C until serve run has ended (see ``test_serve_run.STOP_S``)
STOP_S = 180.0
EXIT_S = 30.0

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


@attrs.frozen
class Block:
    language: str
    text: str


def blocks(page: str) -> list[Block]:
    """The fenced blocks of the section, in order."""
    section = page.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return [Block(m[1], m[2]) for m in _FENCE.finditer(section)]


def commands(script: str) -> list[str]:
    """A ``sh`` block's commands: one a line, a here-document with its lines."""
    found: list[str] = []
    lines = iter(script.splitlines())
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        heredoc = re.search(r"<<'(\w+)'", line)
        if heredoc:
            body = [line]
            for more in lines:
                body.append(more)
                if more == heredoc[1]:
                    break
            found.append("\n".join(body))
        else:
            found.append(line)
    return found


def test_the_page_has_what_the_replay_needs() -> None:
    found = blocks(PAGE.read_text(encoding="utf-8"))
    scripts = [b for b in found if b.language == "sh"]
    served = [c for s in scripts for c in commands(s.text) if c.startswith(SERVES)]
    assert len(served) == 2, served
    assert [b.language for b in found].count("python") == 1
    assert commands("a\n# note\ncat > f <<'EOF'\nx = 1\nEOF\nb\n") == [
        "a",
        "cat > f <<'EOF'\nx = 1\nEOF",
        "b",
    ]


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox(tmp_path) as made:
        yield made


def test_run_it_on_one_machine_as_written(box: Sandbox, tmp_path: Path) -> None:
    found = blocks(PAGE.read_text(encoding="utf-8"))
    (client,) = [b.text for b in found if b.language == "python"]
    serving: Started | None = None
    served = 0

    def ask() -> None:
        answer = box.run(f"{box.cwd}/.venv/bin/python - <<'EOF'\n{client}EOF", COMMAND_S)
        assert answer.returncode == 0, answer.stderr
        assert "embedding=[" in answer.stdout, answer.stdout

    for block in found:
        if block.language == "text":
            assert serving is not None, "a text block says what serve run says"
            assert block.text.strip() in serving.output, serving.output
        elif block.language == "python":
            continue  # the client: run against each serve run, below
        elif block.language == "sh":
            if serving is not None:
                assert serving.interrupt(STOP_S) == 0, serving.output  # Ctrl-C
                serving = None
            for command in commands(block.text):
                if command.startswith(SERVES):
                    served += 1
                    serving = box.serve(command, tmp_path / f"serve-{served}.log", READY, ANSWER_S)
                    ask()
                else:
                    done = box.run(command, COMMAND_S)
                    assert done.returncode == 0, f"{command}:\n{done.stdout}{done.stderr}"
    assert serving is None, "the page stops what it starts"
    assert served == 2
    box.drained(EXIT_S)
