"""Input files the command line cannot use: named by file, line and byte."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from synapse_core import HostConfig
from synapse_core.cli import make_cli
from synapse_core.errors import ConfigError
from synapse_core.plugins import PluginHost
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import FakeTransport


def fake_plugins() -> PluginHost:
    """The fake transport's worker subprocesses, as the shipped catalog's ``mock``."""
    return PluginHost([transport_plugin(FakeTransport("mock"))])


def invoke(args: list[str], plugins: str | None = None, stdin: bytes | None = None) -> Result:
    """``synapse ARGS`` served by the fake transport, or by the installed entry
    points that ``plugins`` (SYNAPSE_PLUGINS) selects."""
    env = {"SYNAPSE_PLUGINS": plugins, "SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    cli = make_cli(fake_plugins if plugins is None else None)
    return CliRunner().invoke(cli, args, env=env, input=stdin)


def error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def jsonl(count: int, bad_line: int, field: str = "text") -> bytes:
    """``count`` lines of ``{"<field>": ...}``; line ``bad_line`` holds invalid UTF-8."""
    lines = [f'{{"{field}": "text number {n}"}}'.encode() for n in range(1, count + 1)]
    lines[bad_line - 1] = f'{{"{field}": "caf'.encode() + b'\xe9"}'
    return b"\n".join(lines) + b"\n"


@pytest.mark.parametrize(("count", "bad_line"), [(5, 3), (6000, 5001), (2, 1), (4, 4)])
def test_invalid_utf8_in_an_input_file_is_reported_at_its_own_line(
    tmp_path: Path, count: int, bad_line: int
) -> None:
    data = tmp_path / "in.jsonl"
    data.write_bytes(jsonl(count, bad_line))
    result = invoke(["embed", "mini-a", "--file", str(data)])
    assert result.exit_code == 2
    line = error_line(result)
    assert f"{data} line {bad_line}: not UTF-8 text" in line
    # The byte within the line: '{"text": "caf' is 13 bytes, so the 14th.
    assert "byte 14" in line


def test_invalid_utf8_on_stdin_is_reported_at_its_own_line() -> None:
    result = invoke(["rerank", "rr", "-q", "q", "--file", "-"], stdin=jsonl(9, 7, field="document"))
    assert result.exit_code == 2
    assert "<stdin> line 7: not UTF-8 text" in error_line(result)


def test_lines_after_blank_ones_keep_their_numbers(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_bytes(b'{"text": "a"}\n\n\r\n{"text": "b"}\n{"text": 5}\n')
    result = invoke(["embed", "mini-a", "--file", str(data)])
    assert result.exit_code == 2
    assert f"{data} line 5: expected a JSON object" in error_line(result)


def test_a_file_with_crlf_line_ends_and_a_bom_free_utf8_text_is_read(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_bytes('{"text": "café"}\r\n{"text": "naïve"}\r\n'.encode())
    result = invoke(["embed", "mini-a", "--file", str(data), "--json"])
    assert result.exit_code == 0, result.stderr


def test_a_lone_surrogate_argument_is_refused_with_its_index() -> None:
    # Undecodable bytes in argv reach Python as lone surrogates.
    result = invoke(["embed", "mini-a", "fine", "caf\udce9"])
    assert result.exit_code == 2
    line = error_line(result)
    assert "refused (invalid-text): input 1 holds a lone surrogate (U+DCE9)" in line


# -- catalogs ----------------------------------------------------------------------------


NOT_UTF8 = b"# caf\xe9 catalog\nmax_waiting = 4\n"


def test_a_catalog_that_is_not_utf8_is_a_config_error_naming_file_and_offset(
    tmp_path: Path,
) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(ConfigError) as info:
        HostConfig.from_toml(path)
    assert info.value.source == str(path)
    (problem,) = info.value.problems
    assert problem.startswith("not UTF-8 text at byte offset 5 (line 1):")


def test_a_catalog_that_is_not_utf8_exits_2_naming_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"max_waiting = 4\n" + NOT_UTF8)
    result = invoke(["catalog", "--catalog", str(path)], plugins="")
    assert result.exit_code == 2
    line = error_line(result)
    assert str(path) in line
    assert "not UTF-8 text at byte offset 21 (line 2)" in line
    assert "internal error" not in line
