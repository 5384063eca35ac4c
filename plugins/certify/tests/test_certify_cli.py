"""``synapse certify`` on a throwaway click group."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from synapse_certify import plugin as certify_plugin
from synapse_certify import read_stream
from synapse_certify.cli import make_group
from synapse_certify.stream import dumps
from synapse_core import PluginHost
from synapse_core.cli import make_cli
from synapse_core.events import (
    AdmissionCount,
    ShapeAdmitted,
    ShapeRefunded,
    WorkerExited,
    WorkerInventory,
    WorkerStarted,
)
from synapse_core.plugin import Shape
from synapse_core.testing import catalog_toml, model_entry, transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport

CHECKPOINT = hashlib.sha256(b"weights").hexdigest()
S16, S32 = Shape(16, 1), Shape(32, 1)
HEAD = [
    WorkerStarted("mock:0", "a#1", 1, "a", 101),
    ShapeAdmitted("mock:0", "a#1", 1, S16, 16, True),
    WorkerInventory("mock:0", "a#1", 1, [S16]),
    AdmissionCount("mock:0", "a#1", 1, 1),
]
GOOD = [
    *HEAD,
    WorkerExited("mock:0", "a#1", 1, True),
    ShapeRefunded("mock:0", "a#1", 1, S16, 16),
]
BAD = [
    *HEAD,
    ShapeAdmitted("mock:0", "a#1", 1, S32, 32, True),
    WorkerInventory("mock:0", "a#1", 1, None, "ExchangeTimeout: no reply"),
    AdmissionCount("mock:0", "a#1", 1, 2),
    WorkerExited("mock:0", "a#1", 1, True),
    ShapeRefunded("mock:0", "a#1", 1, S16, 16),
    ShapeRefunded("mock:0", "a#1", 1, S32, 32),
    WorkerStarted("mock:0", "b#2", 3, "b", 102),
    ShapeAdmitted("mock:0", "b#2", 3, S16, 16, True),
    WorkerInventory("mock:0", "b#2", 3, [S16]),
    AdmissionCount("mock:0", "b#2", 3, 2),
    WorkerExited("mock:0", "b#2", 3, True),
    ShapeRefunded("mock:0", "b#2", 3, S16, 16),
]


def hooked_cli() -> click.Group:
    """A stand-in for the ``synapse`` group, extended through the plugin's hook."""
    cli = click.Group("synapse")
    certify_plugin.synapse_register_commands(cli=cli)
    return cli


def in_process_cli() -> click.Group:
    # The core's fake transport stands in for a serving plugin, under the name "mock".
    cli = click.Group("synapse")
    cli.add_command(
        make_group(lambda: PluginHost([transport_plugin(InProcessFakeTransport("mock"))]))
    )
    return cli


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_the_hook_adds_the_certify_group() -> None:
    group = hooked_cli().commands["certify"]
    assert isinstance(group, click.Group)
    assert set(group.commands) == {"validate", "record", "identity"}


def test_validate_passes_a_good_stream(tmp_path: Path) -> None:
    stream = write(tmp_path / "good.jsonl", dumps(GOOD))
    result = CliRunner().invoke(hooked_cli(), ["certify", "validate", stream])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "placement gate passed: 6 events, 1 inventories of 1 worker generation(s)\n"
    )


def test_validate_prints_one_line_per_problem_and_exits_3(tmp_path: Path) -> None:
    # Blank lines count: the report names the file's own line numbers.
    data = dumps(BAD).replace(b"\n", b"\n\n", 1)
    stream = write(tmp_path / "bad.jsonl", data)
    result = CliRunner().invoke(hooked_cli(), ["certify", "validate", stream])
    assert result.exit_code == 3
    assert result.output.splitlines() == [
        "line 7: a#1 generation 1: inventory is missing (not read: ExchangeTimeout: no reply) "
        "[inventory-missing]",
        "line 15: b#2 generation 3: inventory holds 1 shape(s), admission count is 2; "
        "admission count 2 differs from the 1 the stream's admissions minus evictions give "
        "[count-mismatch]",
        "placement gate failed with 2 problem(s): 16 events, 3 inventories of 2 worker "
        "generation(s)",
    ]


def test_validate_json(tmp_path: Path) -> None:
    stream = write(tmp_path / "bad.jsonl", dumps(BAD))
    result = CliRunner().invoke(hooked_cli(), ["certify", "validate", "--json", stream])
    assert result.exit_code == 3
    report = json.loads(result.output)
    assert report["ok"] is False
    assert [(p["rule"], p["worker_id"], p["generation"], p["at"]) for p in report["problems"]] == [
        ("inventory-missing", "a#1", 1, 6),
        ("count-mismatch", "b#2", 3, 14),
    ]


def test_usage_errors_exit_apart_from_a_failed_gate(tmp_path: Path) -> None:
    # 2: called wrongly (click's usage status), 3: judged and failed, 1: unusable input.
    missing = CliRunner().invoke(hooked_cli(), ["certify", "validate"])
    assert missing.exit_code == 2
    assert "Missing argument" in missing.stderr
    unknown = CliRunner().invoke(hooked_cli(), ["certify", "validate", "--jsn", "x"])
    assert unknown.exit_code == 2
    failed = CliRunner().invoke(
        hooked_cli(), ["certify", "validate", write(tmp_path / "bad.jsonl", dumps(BAD))]
    )
    assert failed.exit_code == 3
    absent = CliRunner().invoke(hooked_cli(), ["certify", "validate", str(tmp_path / "no")])
    assert absent.exit_code == 1


def test_validate_names_the_malformed_line(tmp_path: Path) -> None:
    stream = write(tmp_path / "broken.jsonl", dumps(GOOD) + b'{"event": "nope"}\n')
    result = CliRunner().invoke(hooked_cli(), ["certify", "validate", stream])
    assert result.exit_code == 1
    assert f"error: {stream} line 7: not a recorded event" in result.stderr

    as_json = CliRunner().invoke(hooked_cli(), ["certify", "validate", "--json", stream])
    assert as_json.exit_code == 1 and json.loads(as_json.output)["line"] == 7


def catalog(tmp_path: Path) -> str:
    model = model_entry("mini-a", package="mock-minilm", ceiling=512, dims=8, buckets=[16, 64])
    return write(tmp_path / "catalog.toml", catalog_toml(model).encode())


def test_record_writes_a_stream_that_validates(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    args = ["certify", "record", "--catalog", catalog(tmp_path), "--out", str(out)]
    result = CliRunner().invoke(in_process_cli(), [*args, "mini-a", "short", "a " * 30])
    assert result.exit_code == 0, result.output
    events = read_stream(out)
    assert sum(isinstance(e, WorkerInventory) for e in events) == 2
    assert f"recorded {len(events)} events to {out}" in result.output
    assert "worker: synapse-core-fake 1; vector space: fake:mock-minilm:d8" in (result.output)
    assert "placement gate passed" in result.output

    validated = CliRunner().invoke(hooked_cli(), ["certify", "validate", str(out)])
    assert validated.exit_code == 0, validated.output


def test_record_reports_a_refused_call(tmp_path: Path) -> None:
    args = ["certify", "record", "--catalog", catalog(tmp_path), "--out", str(tmp_path / "s")]
    result = CliRunner().invoke(in_process_cli(), [*args, "no-such-model", "text"])
    assert result.exit_code == 1
    assert "error: model 'no-such-model' is not in the catalog" in result.stderr


def test_identity_with_a_named_worker(tmp_path: Path) -> None:
    base = ["certify", "identity", "--checkpoint", CHECKPOINT, "--os-build", "test-os"]
    worker = ["--worker", "synapse-mock-transport==0.1.0", "--policy", "precision=fp16"]
    result = CliRunner().invoke(in_process_cli(), [*base, *worker, "--json"])
    assert result.exit_code == 0, result.output
    parts = json.loads(result.output)
    assert parts["worker"] == ["synapse-mock-transport", "0.1.0"]
    assert parts["conversion_policy"] == [["precision", "fp16"]]
    assert parts["checkpoint_sha256"] == CHECKPOINT and len(parts["digest"]) == 64

    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"weights")
    by_file = ["certify", "identity", "--checkpoint-file", str(weights), "--os-build", "test-os"]
    plain = CliRunner().invoke(in_process_cli(), [*by_file, *worker])
    assert plain.exit_code == 0, plain.output
    assert plain.output.splitlines()[0] == parts["digest"]
    assert "  policy precision=fp16" in plain.output

    other = CliRunner().invoke(in_process_cli(), [*base, "--worker", "x==2", "--json"])
    assert json.loads(other.output)["digest"] != parts["digest"]


def test_identity_reads_the_worker_from_a_model(tmp_path: Path) -> None:
    args = ["certify", "identity", "--checkpoint", CHECKPOINT, "--json"]
    model = ["--model", "mini-a", "--catalog", catalog(tmp_path)]
    result = CliRunner().invoke(in_process_cli(), [*args, *model])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["worker"] == ["synapse-core-fake", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--worker", "w==1"], "exactly one of --checkpoint and --checkpoint-file"),
        (["--checkpoint", CHECKPOINT], "exactly one of --worker and --model"),
        (["--checkpoint", "abc", "--worker", "w==1"], "64 hexadecimal digits"),
        (["--checkpoint", CHECKPOINT, "--worker", "w"], "IMPLEMENTATION==VERSION"),
        (["--checkpoint", CHECKPOINT, "--worker", "w==1", "--policy", "x"], "KEY=VALUE"),
    ],
)
def test_identity_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(in_process_cli(), ["certify", "identity", *args])
    assert result.exit_code == 2
    assert message in result.stderr


def test_the_synapse_command_keeps_the_certify_exit_statuses(tmp_path: Path) -> None:
    cli = make_cli(lambda: PluginHost([certify_plugin]))
    bad = write(tmp_path / "bad.jsonl", dumps(BAD))
    assert CliRunner().invoke(cli, ["certify", "validate", bad]).exit_code == 3
    good = write(tmp_path / "good.jsonl", dumps(GOOD))
    assert CliRunner().invoke(cli, ["certify", "validate", good]).exit_code == 0
    usage = CliRunner().invoke(cli, ["certify", "validate", "--bogus", good])
    assert usage.exit_code == 2 and "usage error" in usage.stderr
