"""``--model [NAME=]PATH_OR_HUB_ID``: how a value is read (a folder, a hub id,
a chosen name), the transport asked for the entry, and the usage errors.

The core reads no model files: a transport builds the entry. Here the fake
transport builds one whose task follows the folder's name, so the tests see
exactly what the core did with it.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from synapse_core.cli import make_cli
from synapse_core.cli.models import parse_source
from synapse_core.config import ModelSpec
from synapse_core.plugins import PluginHost
from synapse_core.testing import catalog_toml, model_entry, transport_plugin
from synapse_core.testing.fake import FakeTransport
from synapse_core.transport import ModelSource


class FolderTransport(FakeTransport):
    """The fake transport, taking models by folder or hub id."""

    def model_from_source(self, source: ModelSource) -> ModelSpec:
        task = "rerank" if source.given.endswith("rerank") else "embed"
        where = {"folder": str(source.folder)} if source.folder else {"hub": source.hub_id}
        return ModelSpec(source.name, task, self.name, "pkg", 32, {"dims": 8}, str(where))


def invoke(*args: str, transport: FakeTransport | None = None) -> Result:
    registered = [transport or FolderTransport("cpu"), FakeTransport("mock")]
    cli = make_cli(lambda: PluginHost([transport_plugin(t) for t in registered]))
    return CliRunner().invoke(cli, list(args), env={"SYNAPSE_CATALOG": None})


def models(result: Result) -> dict[str, dict[str, str]]:
    assert result.exit_code == 0, result.output
    return {m["name"]: m for m in json.loads(result.stdout)["models"]}


def test_a_folder_is_named_by_its_folder_and_a_hub_id_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    assert parse_source("my-model") == ModelSource("my-model", folder=folder)
    assert parse_source(str(folder)) == ModelSource("my-model", folder=folder)
    assert parse_source("./my-model/") == ModelSource("my-model", folder=folder)
    assert parse_source("other=my-model") == ModelSource("other", folder=folder)
    assert parse_source("BAAI/bge-small-en-v1.5") == ModelSource(
        "BAAI/bge-small-en-v1.5", hub_id="BAAI/bge-small-en-v1.5"
    )
    assert parse_source("bge=BAAI/bge-small-en-v1.5").name == "bge"
    odd = tmp_path / "a=b"
    odd.mkdir()
    assert parse_source(str(odd)) == ModelSource("a=b", folder=odd)  # "=" inside a path


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("=BAAI/bge", "gives an empty name before '='"),
        ("name=", "names no folder or hub id"),
        ("./absent", "is neither a folder nor a hub id"),
        ("no-slash", "is neither a folder nor a hub id"),
        ("a/b/c", "is neither a folder nor a hub id"),
        ("file.txt", "is a file; give the model's folder"),
    ],
)
def test_a_bad_value_is_refused_saying_what_is_wrong(
    value: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file.txt").write_text("x", encoding="utf-8")
    with pytest.raises(click.BadParameter, match=problem):
        parse_source(value)
    result = invoke("catalog", "--model", value)
    assert result.exit_code == 2
    assert "Invalid value for '--model'" in result.output and problem in result.output


def test_the_transport_builds_each_entry_and_the_catalog_is_added_to(tmp_path: Path) -> None:
    (tmp_path / "a-rerank").mkdir()
    alone = models(invoke("catalog", "--json", "--model", str(tmp_path / "a-rerank")))
    # Without a catalog file, only the models given: the shipped ones are left out.
    assert list(alone) == ["a-rerank"] and alone["a-rerank"]["task"] == "rerank"
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog_toml(model_entry("mine")), encoding="utf-8")
    both = models(invoke("catalog", "--json", "--catalog", str(catalog), "--model", "x=org/name"))
    assert list(both) == ["mine", "x"] and both["x"]["transport"] == "cpu"


def test_transport_chooses_who_builds_the_entry_and_one_that_cannot_says_so(
    tmp_path: Path,
) -> None:
    (tmp_path / "m").mkdir()
    taken = models(
        invoke(
            "catalog",
            "--json",
            "--transport",
            "fake",
            "--model",
            str(tmp_path / "m"),
            transport=FolderTransport("fake"),
        )
    )
    assert taken["m"]["transport"] == "fake"
    refused = invoke("catalog", "--transport", "mock", "--model", str(tmp_path / "m"))
    assert refused.exit_code == 2
    assert "transport 'mock' does not take a model by folder or hub id" in refused.output
    unknown = invoke("catalog", "--transport", "nope", "--model", str(tmp_path / "m"))
    assert unknown.exit_code == 2
    assert "no transport 'nope' is installed (installed: cpu, mock" in unknown.output


def test_a_one_model_command_calls_the_flagged_model_with_every_argument_an_input(
    tmp_path: Path,
) -> None:
    (tmp_path / "m").mkdir()
    result = invoke("embed", "--model", str(tmp_path / "m"), "--json", "first", "second")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["vectors"]) == 2
    similar = invoke("similarity", "--model", str(tmp_path / "m"), "--json", "a", "b", "c")
    assert similar.exit_code == 0, similar.output
    assert len(json.loads(similar.stdout)["similarities"]) == 2
    twice = invoke("embed", "--model", f"a={tmp_path / 'm'}", "--model", f"b={tmp_path / 'm'}", "x")
    assert twice.exit_code == 2 and "give --model once" in twice.output
    alone = invoke("similarity", "--model", str(tmp_path / "m"), "only")
    assert alone.exit_code == 2 and "Missing argument 'OTHERS...'" in alone.output
