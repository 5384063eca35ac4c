"""The ``synapse`` command line, through click's CliRunner.

Which plugins load is always explicit: by default the fake transport (real
worker subprocesses, from :mod:`synapse_core.testing.fake`) serves under the
name the shipped catalog uses, ``mock``; a test may instead name the installed
entry points to load (``plugins``: ``SYNAPSE_PLUGINS``, "" loads none), or hand
``make_cli`` its own plugin objects.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from synapse_core.cli import make_cli
from synapse_core.cli.calls import BATCH, MANY_BATCHES, show_progress
from synapse_core.cli.render import CUT_SHOWN
from synapse_core.config import ModelSpec
from synapse_core.hookspecs import hookimpl
from synapse_core.plugins import PluginHost
from synapse_core.testing import catalog_toml, model_entry, transport_plugin
from synapse_core.testing.fake import FakeTransport

needs_mock = pytest.mark.skipif(
    importlib.util.find_spec("synapse_mock_transport") is None,
    reason="the synapse-mock-transport plugin is not installed",
)


def fake_plugins() -> PluginHost:
    """The fake transport, registered as ``mock`` (the shipped catalog's transport)."""
    return PluginHost([transport_plugin(FakeTransport("mock"))])


#: the shipped catalog's models, in its order
SHIPPED = ["minilm", "minilm-rerank", "mini-a", "mini-b", "rr"]


def invoke(
    args: Sequence[str],
    *,
    plugins: str | None = None,
    load: Callable[[], PluginHost] | None = None,
    env: dict[str, str] | None = None,
) -> Result:
    """Run ``synapse ARGS``; ``plugins`` is SYNAPSE_PLUGINS (None: unset).

    With neither ``plugins`` nor ``load``, the fake transport serves.
    """
    if plugins is None and load is None:
        load = fake_plugins
    environment: dict[str, str | None] = {
        "SYNAPSE_PLUGINS": plugins,
        "SYNAPSE_CATALOG": None,
        "SYNAPSE_DEBUG": None,
    }
    environment.update(env or {})
    return CliRunner().invoke(make_cli(load), list(args), env=environment)


def error_line(result: Result) -> str:
    """The single line a failing command printed on stderr."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("synapse: "), lines[0]
    return lines[0]


#: a mock catalog entry; ``options`` are the transport's
model = functools.partial(model_entry, ceiling=512)


def write_catalog(path: Path, *models: dict[str, Any], **settings: Any) -> Path:
    path.write_text(catalog_toml(*models, **settings), encoding="utf-8")
    return path


def trace_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_served_by_exited_subprocesses(trace: Path, commands: int = 1) -> None:
    """One worker process per command, none of them this one, all gone now."""
    records = trace_records(trace)
    assert {r["frame"] for r in records} >= {"hello", "infer"}
    pids = {r["pid"] for r in records}
    assert len(pids) == commands
    assert os.getpid() not in pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):  # the command confirmed its exit
            os.kill(pid, 0)


# -- plugins -------------------------------------------------------------------------


@needs_mock
def test_plugins_lists_the_selected_plugin_and_its_transport() -> None:
    result = invoke(["plugins"], plugins="mock")
    assert result.exit_code == 0, result.stderr
    assert "Plugins (SYNAPSE_PLUGINS=mock):" in result.stdout
    assert "synapse-mock-transport" in result.stdout
    assert "hooks: synapse_register_transports" in result.stdout
    assert "mock  available" in result.stdout
    assert "catalog models: mini-a, mini-b, rr" in result.stdout

    doc = json.loads(invoke(["plugins", "--json"], plugins="mock").stdout)
    assert doc["selected"] == ["mock"]
    assert [p["name"] for p in doc["plugins"]] == ["mock"]
    assert doc["plugins"][0]["distribution"] == "synapse-mock-transport"
    assert doc["plugins"][0]["hooks"] == ["synapse_register_transports"]
    assert doc["transports"] == [
        {
            "name": "mock",
            "plugin": "mock",
            "available": True,
            "reason": "",
            "details": "",
            "models": ["mini-a", "mini-b", "rr"],
        }
    ]


def test_plugins_with_empty_selection_lists_none_and_says_so() -> None:
    result = invoke(["plugins"], plugins="")
    assert result.exit_code == 0, result.stderr
    assert "No plugins loaded: SYNAPSE_PLUGINS is set and empty." in result.stdout
    assert "No transports" in result.stdout

    doc = json.loads(invoke(["plugins", "--json"], plugins="").stdout)
    assert doc == {"selected": [], "plugins": [], "transports": [], "problems": []}


class _Misspelled:
    __name__ = "misspelled"

    @hookimpl
    def synapse_register_transport(self, register: Callable[[object], None]) -> None:
        """Misspelled on purpose: the hook is ``synapse_register_transports``."""


class _BrokenCommands:
    __name__ = "broken-commands"

    @hookimpl
    def synapse_register_commands(self, cli: click.Group) -> None:
        raise RuntimeError("cannot add my commands")


class _Commands:
    __name__ = "commands"

    @hookimpl
    def synapse_register_commands(self, cli: click.Group) -> None:
        @cli.command("hello")
        def hello() -> None:
            """Say hello."""
            click.echo("hello from a plugin")

        @cli.command("explode")
        def explode() -> None:
            raise RuntimeError("boom")


class _Shadowing:
    __name__ = "shadowing"

    @hookimpl
    def synapse_register_commands(self, cli: click.Group) -> None:
        @cli.command("catalog")
        def catalog() -> None:
            click.echo("not the catalog")


def test_a_plugin_cannot_replace_a_built_in_command() -> None:
    result = invoke(["catalog", "--json"], load=lambda: PluginHost([_Shadowing()]))
    assert result.exit_code == 0
    assert [m["name"] for m in json.loads(result.stdout)["models"]] == SHIPPED
    assert "replaced the built-in command 'catalog'" in error_line(result)


def test_plugins_reports_a_broken_plugin_by_name() -> None:
    result = invoke(["plugins"], load=lambda: PluginHost([_Misspelled()]))
    assert result.exit_code == 1, result.stderr  # listed, and a failing status for CI
    assert "misspelled" in result.stdout
    assert "error: unknown hooks (misspelled?): synapse_register_transport" in result.stdout


def test_plugin_commands_are_added_and_a_failing_hook_is_only_a_warning() -> None:
    def load() -> PluginHost:
        return PluginHost([_BrokenCommands(), _Commands()])

    help_text = invoke(["--help"], load=load)
    assert help_text.exit_code == 0
    assert "hello" in help_text.stdout

    result = invoke(["hello"], load=load)
    assert result.exit_code == 0
    assert result.stdout == "hello from a plugin\n"
    line = error_line(result)
    assert "warning" in line and "broken-commands" in line and "cannot add my commands" in line

    listing = invoke(["plugins"], load=load)
    assert listing.exit_code == 1
    assert "synapse_register_commands failed" in listing.stdout
    assert listing.stderr == ""  # listed, not warned about twice


def test_internal_error_is_one_line_unless_debugging() -> None:
    def load() -> PluginHost:
        return PluginHost([_Commands()])

    result = invoke(["explode"], load=load)
    assert result.exit_code == 1
    line = error_line(result)
    assert "internal error: RuntimeError: boom" in line
    assert "SYNAPSE_DEBUG=1" in line

    debug = invoke(["explode"], load=load, env={"SYNAPSE_DEBUG": "1"})
    assert debug.exit_code == 1
    assert "Traceback" in debug.stderr


# -- refusals and usage errors ------------------------------------------------------


def test_embed_without_any_transport_is_refused() -> None:
    result = invoke(["embed", "mini-a", "hi"], plugins="")
    assert result.exit_code == 2
    line = error_line(result)
    assert "refused (transport-unavailable)" in line
    assert "no installed transport provides model 'mini-a'" in line
    assert result.stdout == ""


def test_unknown_model_exits_2_with_one_line() -> None:
    result = invoke(["embed", "no-such-model", "hi"])
    assert result.exit_code == 2
    line = error_line(result)
    assert "refused (unknown-model): model 'no-such-model' is not in the catalog" in line


def test_wrong_task_and_over_ceiling_are_refusals() -> None:
    wrong = invoke(["rerank", "mini-a", "--query", "q", "doc"])
    assert wrong.exit_code == 2
    assert "refused (wrong-task)" in error_line(wrong)

    over = invoke(["embed", "mini-a", "short", "word " * 600])
    assert over.exit_code == 2
    assert "refused (over-ceiling): input 1 has 602 tokens" in error_line(over)


def test_truncate_cuts_long_inputs_and_names_them_across_batches() -> None:
    """The refusal says "ask for truncation explicitly": ``--truncate`` is how,
    and each input cut is named by its place in the whole input."""
    long = "word " * 600
    texts = ["short"] * (BATCH + 6)
    texts[3] = texts[BATCH + 4] = long
    cut = invoke(["embed", "mini-a", "--truncate", "end", "--json", *texts])
    assert cut.exit_code == 0, cut.stderr
    doc = json.loads(cut.stdout)
    assert doc["truncated"] == [3, BATCH + 4] and len(doc["vectors"]) == len(texts)
    human = invoke(["embed", "mini-a", "--truncate", "start", "short", long])
    assert human.stdout.splitlines()[-1] == "cut to the model's ceiling (--truncate): input 1"
    ranked = invoke(["rerank", "rr", "-q", "q", "--truncate", "end", "--json", long, "d"])
    assert json.loads(ranked.stdout)["truncated"] == [0]
    near = invoke(["similarity", "mini-a", "--truncate", "end", "a", "b", long])
    assert near.stdout.splitlines()[-1] == (
        "cut to the model's ceiling (--truncate): 'word word word word word word word wo...'"
    )
    assert json.loads(  # indexes into the whole input, FIRST being 0
        invoke(["similarity", "mini-a", "--json", "--truncate", "end", "a", "b", long]).stdout
    )["truncated"] == [2]
    many = invoke(["embed", "mini-a", "--truncate", "end", *[long] * (CUT_SHOWN + 2)])
    assert many.stdout.splitlines()[-1].endswith(
        f"input 0, 1, {', '.join(map(str, range(2, CUT_SHOWN)))} and 2 more"
    )
    assert json.loads(invoke(["embed", "mini-a", "--json", "a"]).stdout)["truncated"] == []
    prompted = invoke(["embed", "mini-a", "--prompt", "query", "--truncate", "start", "a"])
    assert prompted.exit_code == 2
    assert "--truncate start would cut off the prompt; use --truncate end" in error_line(prompted)


def test_usage_errors_exit_2_with_one_line() -> None:
    missing = invoke(["embed"], plugins="")
    assert missing.exit_code == 2
    assert "usage error: Missing argument 'MODEL'" in error_line(missing)

    no_query = invoke(["rerank", "rr", "doc"], plugins="")
    assert no_query.exit_code == 2
    assert "--query" in error_line(no_query)

    bad_deadline = invoke(["embed", "mini-a", "hi", "--deadline", "0"], plugins="")
    assert bad_deadline.exit_code == 2
    assert "--deadline" in error_line(bad_deadline)

    unknown = invoke(["frobnicate"], plugins="")
    assert unknown.exit_code == 2
    assert "frobnicate" in error_line(unknown)


def test_no_command_prints_the_help() -> None:
    result = invoke([], plugins="")
    assert result.exit_code == 2
    assert "Usage: synapse [OPTIONS] COMMAND" in result.stderr
    assert "embed" in result.stderr and "rerank" in result.stderr


def test_texts_and_file_together_are_a_usage_error(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "a"}\n', encoding="utf-8")
    result = invoke(["embed", "mini-a", "b", "--file", str(data)], plugins="")
    assert result.exit_code == 2
    assert "not both" in error_line(result)


def test_bad_jsonl_line_is_named(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    lines = ['{"text": "fine"}', "", '{"txt": "typo"}', '{"text": "never read"}']
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke(["embed", "mini-a", "--file", str(data)])
    assert result.exit_code == 2
    line = error_line(result)
    assert f"{data} line 3" in line
    assert '"text"' in line

    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"document": "fine"}\nnot json\n', encoding="utf-8")
    result = invoke(["rerank", "rr", "-q", "q", "--file", str(docs)])
    assert result.exit_code == 2
    assert f"{docs} line 2" in error_line(result)


def test_refusal_from_a_file_names_the_line(tmp_path: Path) -> None:
    data = tmp_path / "in.jsonl"
    data.write_text('{"text": "one"}\n\n{"text": ""}\n', encoding="utf-8")
    result = invoke(["embed", "mini-a", "--file", str(data)])
    assert result.exit_code == 2
    line = error_line(result)
    assert "refused (empty-sequence): input 1 is empty" in line
    assert f"({data} line 3)" in line


# -- catalog ---------------------------------------------------------------------------


def test_bad_catalog_file_exits_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[[models]]\nname = "m"\ntask = "embed"\ntransport = "mock"\n'
        'package = "p"\nceiling = "lots"\n',
        encoding="utf-8",
    )
    for args, env in (
        (["catalog", "--catalog", str(bad)], {}),
        (["embed", "m", "hi"], {"SYNAPSE_CATALOG": str(bad)}),
    ):
        result = invoke(args, plugins="", env=env)
        assert result.exit_code == 2
        line = error_line(result)
        assert str(bad) in line
        assert "models[0].ceiling: expected int" in line


def test_bad_transport_option_exits_2_naming_the_option(tmp_path: Path) -> None:
    path = write_catalog(tmp_path / "c.toml", model("m", dims="wide"))
    result = invoke(["catalog", "--catalog", str(path)])
    assert result.exit_code == 2
    assert "models[0].options.dims: expected int" in error_line(result)


def test_plugins_lists_a_bad_catalog_as_a_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("max_waiting = 0\n", encoding="utf-8")
    result = invoke(["plugins", "--json"], plugins="", env={"SYNAPSE_CATALOG": str(bad)})
    assert result.exit_code == 1
    (problem,) = json.loads(result.stdout)["problems"]
    assert "max_waiting: must be greater than 0" in problem


def test_missing_catalog_file_exits_2(tmp_path: Path) -> None:
    result = invoke(["catalog", "--catalog", str(tmp_path / "absent.toml")], plugins="")
    assert result.exit_code == 2
    assert "cannot read file" in error_line(result)


def test_catalog_prints_model_descriptions_as_notes() -> None:
    result = invoke(["catalog"], plugins="")
    assert result.exit_code == 0, result.stderr
    notes = result.stdout.split("Notes:\n", 1)[1].splitlines()
    assert notes[1].startswith("  minilm-rerank: bi-encoder rerank: cosine of separate MiniLM")
    assert notes[1].endswith("not a cross-encoder")
    doc = json.loads(invoke(["catalog", "--json"], plugins="").stdout)
    assert {m["name"]: m["description"] for m in doc["models"]}["mini-a"] == ""


def test_catalog_shows_each_models_prompts(tmp_path: Path) -> None:
    prompts = {"query": "query: ", "passage": "passage: "}
    path = write_catalog(tmp_path / "e5.toml", {**model("e5"), "prompts": prompts})
    result = invoke(["catalog", "--catalog", str(path)], plugins="")
    assert result.exit_code == 0, result.stderr
    assert "  e5: prompts query = 'query: ', passage = 'passage: '" in result.stdout
    doc = json.loads(invoke(["catalog", "--catalog", str(path), "--json"], plugins="").stdout)
    assert {m["name"]: m["prompts"] for m in doc["models"]}["e5"] == prompts


def test_catalog_option_and_environment_choose_the_catalog(tmp_path: Path) -> None:
    one = write_catalog(tmp_path / "one.toml", model("from-option", buckets=[16, 64]))
    two = write_catalog(tmp_path / "two.toml", model("from-env"))

    def names(result: Result) -> list[str]:
        assert result.exit_code == 0, result.stderr
        return [m["name"] for m in json.loads(result.stdout)["models"]]

    assert names(invoke(["catalog", "--json"])) == SHIPPED
    assert names(invoke(["catalog", "--json", "--catalog", str(one)])) == ["from-option"]
    assert names(invoke(["catalog", "--json"], env={"SYNAPSE_CATALOG": str(two)})) == ["from-env"]
    # An explicit option wins over the environment.
    both = ["catalog", "--json", "--catalog", str(one)]
    chosen = invoke(both, env={"SYNAPSE_CATALOG": str(two)})
    assert names(chosen) == ["from-option"]


def test_catalog_shows_buckets_effective_ceilings_and_availability(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path / "c.toml",
        model("bucketed", buckets=[16, 64]),
        {**model("plain", task="rerank"), "workers": 2},
        {**model("elsewhere"), "transport": "not-installed"},
    )
    doc = json.loads(invoke(["catalog", "--json", "--catalog", str(path)]).stdout)
    rows = {m["name"]: m for m in doc["models"]}
    assert rows["bucketed"]["buckets"] == [16, 64]
    assert rows["bucketed"]["lane"] == "fake:0"
    assert rows["bucketed"]["available"] is True
    assert (rows["bucketed"]["workers"], rows["plain"]["workers"]) == (1, 2)
    # The transport declares its buckets before any worker starts: the
    # largest caps the ceiling, and defaults show as well as set options.
    assert (rows["bucketed"]["ceiling"], rows["bucketed"]["catalog_ceiling"]) == (64, 512)
    assert rows["plain"]["buckets"] == [16, 32, 64, 128, 256, 512]
    assert rows["plain"]["ceiling"] == 512
    assert rows["plain"]["task"] == "rerank"
    assert rows["elsewhere"]["buckets"] is None
    assert rows["elsewhere"]["available"] is False
    assert "no installed transport provides model 'elsewhere'" in rows["elsewhere"]["problem"]

    human = invoke(["catalog", "--catalog", str(path)])
    assert human.exit_code == 0
    lines = {line.split()[0]: line.split() for line in human.stdout.splitlines()[2:]}
    assert " ".join(lines["bucketed"]) == (
        "bucketed embed mock fake:0 1 64 (catalog 512) 16,64 available"
    )
    assert lines["plain"][4:7] == ["2", "512", "16,32,64,128,256,512"]
    assert lines["elsewhere"][6] == "-"
    assert lines["elsewhere"][7] == "unavailable:"


def test_catalog_lists_only_buckets_a_call_can_use(tmp_path: Path) -> None:
    path = write_catalog(
        tmp_path / "c.toml",
        {**model("low", buckets=[16, 64, 256, 512]), "ceiling": 256},
        {**model("between", buckets=[16, 64, 256, 512]), "ceiling": 100},
    )
    doc = json.loads(invoke(["catalog", "--json", "--catalog", str(path)]).stdout)
    rows = {m["name"]: m for m in doc["models"]}
    assert rows["low"]["buckets"] == [16, 64, 256]
    assert rows["between"]["buckets"] == [16, 64, 256]  # 256 holds sequences of 65-100


def test_catalog_says_which_models_a_transport_shipped(tmp_path: Path) -> None:
    class Shipping(FakeTransport):
        def catalog_models(self) -> Sequence[ModelSpec]:
            return [
                ModelSpec(name=name, task="embed", transport="mock", package="p", ceiling=64)
                for name in ("shipped-one", "mine")
            ]

    path = write_catalog(tmp_path / "c.toml", model("mine"))
    load = functools.partial(PluginHost, [transport_plugin(Shipping("mock"))])
    doc = json.loads(invoke(["catalog", "--json", "--catalog", str(path)], load=load).stdout)
    shipped = {m["name"]: m["shipped_by"] for m in doc["models"]}
    assert shipped == {"mine": None, "shipped-one": "mock"}  # the file's own entry wins
    human = invoke(["catalog", "--catalog", str(path)], load=load).stdout
    assert f"  shipped-one: not in {path}: shipped by the installed transport 'mock'" in human
    assert "  mine: not in" not in human


# -- embed and rerank through the real subprocess worker ----------------------------------


@pytest.mark.subprocess
def test_embed_human_output_is_served_by_a_subprocess_worker(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    path = write_catalog(tmp_path / "c.toml", model("m", dims=32, trace=str(trace)))
    result = invoke(["embed", "m", "first text", "second text", "--catalog", str(path)])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "m: 2 vectors, identity fake:pkg-m:d32"
    assert lines[1].split() == ["index", "dims", "norm", "first", "values", "text"]
    for index, text in ((0, "first text"), (1, "second text")):
        cells = lines[2 + index].split()
        assert cells[:3] == [str(index), "32", "1.0000"]
        assert lines[2 + index].endswith(text)
    assert_served_by_exited_subprocesses(trace)


@pytest.mark.subprocess
def test_embed_json_has_full_vectors_in_input_order(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    path = write_catalog(tmp_path / "c.toml", model("m", trace=str(trace)))
    texts = ["alpha beta", "gamma", "alpha beta"]
    result = invoke(["embed", "m", *texts, "--json", "--catalog", str(path)])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["model"] == "m"
    assert doc["identity"] == "fake:pkg-m:d64"
    assert doc["dims"] == 64
    vectors = doc["vectors"]
    assert [len(v) for v in vectors] == [64, 64, 64]
    assert all(math.isclose(math.hypot(*v), 1.0, rel_tol=1e-5) for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert_served_by_exited_subprocesses(trace)


@pytest.mark.subprocess
def test_similarity_prints_the_cosine_of_the_first_text_with_each_other(tmp_path: Path) -> None:
    path = write_catalog(tmp_path / "c.toml", model("m"))
    texts = ["alpha beta", "alpha beta", "gamma delta"]
    doc = json.loads(invoke(["similarity", "m", *texts, "--json", "--catalog", str(path)]).stdout)
    cosines = [s["cosine"] for s in doc["similarities"]]
    assert [s["text"] for s in doc["similarities"]] == texts[1:]
    assert math.isclose(cosines[0], 1.0, rel_tol=1e-6) and abs(cosines[1]) < 0.9
    human = invoke(["similarity", "m", *texts, "--catalog", str(path)])
    assert human.exit_code == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[1].split() == ["cosine", "text"]
    assert lines[2].split() == ["+1.0000", "alpha", "beta"]
    assert lines[-1] == f"identity {doc['identity']}"


@pytest.mark.subprocess
def test_rerank_human_sorts_by_score_and_json_keeps_input_order(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    path = write_catalog(tmp_path / "c.toml", model("r", task="rerank", trace=str(trace)))
    docs = ["a brain junction", "what is synapse", "a serving host"]
    args = ["rerank", "r", "--query", "what is synapse", *docs, "--catalog", str(path)]

    human = invoke(args)
    assert human.exit_code == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].startswith("r: 3 documents for 'what is synapse'")
    assert lines[1].split() == ["rank", "index", "score", "document"]
    # The document equal to the query scores 1 (unit vectors) and comes first.
    assert lines[2].split() == ["1", "1", "1.0000", "what", "is", "synapse"]
    assert sorted(line.split()[1] for line in lines[2:]) == ["0", "1", "2"]

    doc = json.loads(invoke([*args, "--json"]).stdout)
    assert doc["model"] == "r"
    assert doc["query"] == "what is synapse"
    assert doc["identity"] == "fake:pkg-r:d64"
    assert len(doc["scores"]) == 3
    assert math.isclose(doc["scores"][1], 1.0, rel_tol=1e-5)
    assert max(doc["scores"]) == doc["scores"][1]
    assert_served_by_exited_subprocesses(trace, commands=2)


@pytest.mark.subprocess
def test_file_input_is_sent_in_batches_and_reassembled_in_order(tmp_path: Path) -> None:
    count = BATCH * MANY_BATCHES + 3
    data = tmp_path / "in.jsonl"
    data.write_text(
        "".join(json.dumps({"text": f"text number {i}", "id": i}) + "\n" for i in range(count)),
        encoding="utf-8",
    )
    trace = tmp_path / "trace.jsonl"
    path = write_catalog(tmp_path / "c.toml", model("m", trace=str(trace)))
    result = invoke(["embed", "m", "--file", str(data), "--json", "--catalog", str(path)])
    assert result.exit_code == 0, result.stderr
    vectors = json.loads(result.stdout)["vectors"]  # stdout holds nothing but the JSON
    assert len(vectors) == count
    # Many batches: the progress label goes to stderr, never stdout.
    assert f"embedding {count} texts in {MANY_BATCHES + 1} batches" in result.stderr

    picks = [0, BATCH - 1, BATCH, count - 1]
    direct = invoke(
        ["embed", "m", "--json", "--catalog", str(path), *(f"text number {i}" for i in picks)]
    )
    assert json.loads(direct.stdout)["vectors"] == [vectors[i] for i in picks]


@pytest.mark.subprocess
def test_refusal_in_a_later_batch_names_its_place_in_the_whole_input(tmp_path: Path) -> None:
    # The worker's largest bucket (16) caps the ceiling below the catalog's
    # 512, so this refusal comes from a batch, not from the up-front check.
    path = write_catalog(tmp_path / "c.toml", model("m", buckets=[16]))
    data = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": "short"})] * (BATCH + 5)
    lines.append(json.dumps({"text": "word " * 20}))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = invoke(["embed", "m", "--file", str(data), "--catalog", str(path)])
    assert result.exit_code == 2
    line = error_line(result)
    assert f"refused (over-ceiling): input {BATCH + 5} has 22 tokens" in line
    assert f"({data} line {BATCH + 6})" in line


@pytest.mark.subprocess
def test_deadline_exceeded_exits_1_with_one_line(tmp_path: Path) -> None:
    # Replies take a second; a 0.2 s deadline cannot be met, however fast the machine.
    path = write_catalog(tmp_path / "c.toml", model("slow", faults={"reply_delay_s": 1.0}))
    result = invoke(["embed", "slow", "hi", "--deadline", "0.2", "--catalog", str(path)])
    assert result.exit_code == 1
    assert "synapse: deadline-exceeded:" in error_line(result)
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("batches", "tty", "shown"),
    [(1, True, False), (2, True, True), (2, False, False), (MANY_BATCHES, False, True)],
)
def test_progress_is_shown_for_several_batches_on_a_terminal_or_many_batches(
    batches: int, tty: bool, shown: bool
) -> None:
    assert show_progress(batches, tty) is shown


def test_a_deadline_bounds_the_exchanges_of_a_one_shot_command() -> None:
    from synapse_core import HostConfig
    from synapse_core.cli.calls import DRAIN_GRACE_S, bounded

    config = HostConfig(exchange_timeout_s=30.0)
    assert bounded(config, None).exchange_timeout_s == 30.0
    assert bounded(config, 0.5).exchange_timeout_s == 0.5 + DRAIN_GRACE_S
    assert bounded(config, 100.0).exchange_timeout_s == 30.0


class _BrokenRegistrar:
    __name__ = "broken-registrar"

    @hookimpl
    def synapse_register_transports(self, register: Callable[[object], None]) -> None:
        raise OSError("no device")


def test_a_registration_hook_that_fails_is_warned_about_by_every_command() -> None:
    """Its transport is missing from the call that needs it: the warning says why,
    not only the refusal (the hook runs when transports are first asked for)."""
    load = functools.partial(
        PluginHost, [_BrokenRegistrar(), transport_plugin(FakeTransport("mock"))]
    )
    result = invoke(["embed", "mini-a", "x"], load=load)
    assert result.exit_code == 0, result.stderr
    assert (
        "plugin 'broken-registrar': synapse_register_transports failed: OSError('no device')"
        in (result.stderr)
    )


@pytest.mark.subprocess
def test_embed_dimensions_cuts_a_model_trained_to_be_cut(tmp_path: Path) -> None:
    """``--dimensions N``: each vector's first N values, normalised again;
    ``synapse catalog`` lists the sizes; another size is refused (exit 2)."""
    path = write_catalog(tmp_path / "c.toml", {**model("m", dims=32), "matryoshka_dims": [8]})
    texts = ["the quick brown fox jumps over the lazy dog", "gamma"]
    whole = json.loads(invoke(["embed", "m", *texts, "--json", "--catalog", str(path)]).stdout)
    result = invoke(["embed", "m", *texts, "--dimensions", "8", "--json", "--catalog", str(path)])
    assert result.exit_code == 0, result.stderr
    cut = json.loads(result.stdout)
    assert cut["dims"] == 8 and cut["identity"] == f"{whole['identity']};dims=8"
    norms = [math.hypot(*full[:8]) for full in whole["vectors"]]
    assert any(norms)  # the fake model's values are sparse: a cut may be all zeros
    for full, short, norm in zip(whole["vectors"], cut["vectors"], norms, strict=True):
        assert short == pytest.approx([v / (norm or 1.0) for v in full[:8]], abs=1e-6)
    listed = invoke(["catalog", "--catalog", str(path)], plugins="")
    assert "  m: vectors may be cut to 8 dimensions (embed --dimensions N)" in listed.stdout
    refused = invoke(["embed", "m", "a", "--dimensions", "4", "--catalog", str(path)])
    assert refused.exit_code == 2  # a refusal, as an unknown prompt is
    assert "dimensions 4 is not supported" in error_line(refused)
    assert "may be cut to 8" in error_line(refused)
    both = invoke(["embed", "m", "a", "--dimensions", "8", "--sparse", "--catalog", str(path)])
    assert both.exit_code == 2 and "not with --sparse or --all" in error_line(both)
