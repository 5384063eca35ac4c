"""``--model PATH``: a tiny model folder served without a catalog, its task
read from ``config.json``, listed and served exactly as a catalog entry
naming the same folder is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.cli import make_cli
from synapse_core.plugin import ConfigError
from synapse_core.testing import catalog_toml, model_entry
from synapse_cpu.flagged import task_of
from synapse_models.testing import TINY


def invoke(*args: str) -> Result:
    cli = make_cli(lambda: synapse.PluginHost([synapse_cpu.plugin]))
    env = {"SYNAPSE_CATALOG": None, "SYNAPSE_DEBUG": None}
    return CliRunner().invoke(cli, list(args), env=env)


def listing(*args: str) -> dict[str, dict[str, Any]]:
    result = invoke("catalog", "--json", *args)
    assert result.exit_code == 0, result.output
    return {m["name"]: m for m in json.loads(result.stdout)["models"]}


@pytest.mark.parametrize(
    ("folder", "task"),
    [
        ("bert-cls", "embed"),
        ("xlmr-mean", "embed"),
        ("bert-rerank", "rerank"),
        ("xlmr-rerank", "rerank"),
    ],
)
def test_the_task_is_read_from_config_json(folder: str, task: str) -> None:
    assert task_of(TINY / folder) == task


def test_a_folder_without_a_readable_config_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.json: cannot read it as JSON"):
        task_of(tmp_path)
    (tmp_path / "config.json").write_text("{not json", encoding="utf-8")
    result = invoke("catalog", "--model", str(tmp_path))
    assert result.exit_code == 2
    assert f"{tmp_path / 'config.json'}: cannot read it as JSON" in result.output


def test_flagged_models_are_listed_as_the_catalog_entries_of_their_folders(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "catalog.toml"
    entries = [
        model_entry("by-catalog", transport="cpu", ceiling=512, model_dir=str(TINY / "bert-cls")),
        model_entry(
            "rerank-by-catalog",
            task="rerank",
            transport="cpu",
            ceiling=512,
            model_dir=str(TINY / "bert-rerank"),
        ),
    ]
    catalog.write_text(catalog_toml(*entries), encoding="utf-8")
    flagged = listing("--model", str(TINY / "bert-cls"), "--model", f"mine={TINY / 'bert-rerank'}")
    assert sorted(flagged) == ["bert-cls", "mine"]  # no shipped models without a catalog
    both = listing(
        "--catalog",
        str(catalog),
        "--model",
        str(TINY / "bert-cls"),
        "--model",
        f"mine={TINY / 'bert-rerank'}",
    )
    assert sorted(both) == ["bert-cls", "by-catalog", "mine", "rerank-by-catalog"]
    for name, same in (("bert-cls", "by-catalog"), ("mine", "rerank-by-catalog")):
        ours, theirs = both[name], both[same]
        for key in ("task", "transport", "lane", "ceiling", "buckets", "scorer", "available"):
            assert ours[key] == theirs[key], (key, ours, theirs)
    assert both["mine"]["task"] == "rerank" and both["mine"]["scorer"] == "cross-encoder"


def test_a_name_taken_twice_is_a_usage_error(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(catalog_toml(model_entry("taken", transport="cpu")), encoding="utf-8")
    clash = invoke("catalog", "--catalog", str(catalog), "--model", f"taken={TINY / 'bert-cls'}")
    assert clash.exit_code == 2
    assert "the name 'taken' is already used by the catalog" in clash.output
    twice = invoke("catalog", "--model", str(TINY / "bert-cls"), "--model", str(TINY / "bert-cls"))
    assert twice.exit_code == 2
    assert "the name 'bert-cls' is already used by --model" in twice.output


@pytest.mark.subprocess
def test_embed_and_rerank_with_model_give_what_the_catalog_entry_gives(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(
        catalog_toml(
            model_entry("e", transport="cpu", ceiling=512, model_dir=str(TINY / "bert-cls")),
            model_entry(
                "r",
                task="rerank",
                transport="cpu",
                ceiling=512,
                model_dir=str(TINY / "bert-rerank"),
            ),
        ),
        encoding="utf-8",
    )
    texts = ["a first text", "and another one"]
    by_flag = invoke("embed", "--model", str(TINY / "bert-cls"), "--json", *texts)
    by_catalog = invoke("embed", "e", "--catalog", str(catalog), "--json", *texts)
    assert by_flag.exit_code == 0 and by_catalog.exit_code == 0, by_flag.output + by_catalog.output
    assert json.loads(by_flag.stdout)["vectors"] == json.loads(by_catalog.stdout)["vectors"]
    query = ["-q", "what is it?", "one document", "another"]
    ranked = invoke("rerank", "--model", str(TINY / "bert-rerank"), "--json", *query)
    expected = invoke("rerank", "r", "--catalog", str(catalog), "--json", *query)
    assert ranked.exit_code == 0, ranked.output
    assert json.loads(ranked.stdout)["scores"] == json.loads(expected.stdout)["scores"]
