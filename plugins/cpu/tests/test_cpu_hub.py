"""Models named by a hub id (``options.hf``, ``options.revision``): found in a
local cache laid out as huggingface_hub lays it out (blobs, refs, snapshots
of symlinks), never downloaded while serving; ``synapse pull`` is the one
way in. Offline throughout (``HF_HUB_OFFLINE=1``): nothing here downloads."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest
from click.testing import CliRunner

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.catalog import Catalog
from synapse_core.cli import make_cli
from synapse_core.plugin import ConfigError
from synapse_core.plugins import PluginHost
from synapse_core.testing import catalog_toml, host_config, model_entry
from synapse_cpu.options import parse_options
from synapse_models.errors import ModelFilesError
from synapse_models.hub import cached_folder
from synapse_models.testing import TINY

REPO = "org/tiny-bert"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim


def cache_model(cache: Path, repo: str, folder: Path, commit: str, *refs: str) -> Path:
    """``folder``'s files in ``cache`` as huggingface_hub stores a snapshot:
    content-addressed blobs, ``refs/<ref>`` naming the commit, and the
    commit's snapshot of relative symlinks to the blobs."""
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = root / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / path.relative_to(folder)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return snapshot


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads its environment once, when first imported
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    cache_model(hub, REPO, TINY / "bert-cls", COMMIT, "main")
    return hub


def test_a_hub_id_resolves_to_its_cached_snapshot(cache: Path) -> None:
    folder = cached_folder(REPO)
    assert folder == cache / "models--org--tiny-bert" / "snapshots" / COMMIT
    assert (folder / "1_Pooling" / "config.json").read_bytes() == (
        TINY / "bert-cls" / "1_Pooling" / "config.json"
    ).read_bytes()


def test_a_revision_picks_its_own_snapshot(cache: Path) -> None:
    other = "fedcba9876543210fedcba9876543210fedcba98"
    cache_model(cache, REPO, TINY / "bert-mean-raw", other, "v2")
    assert cached_folder(REPO, "v2").name == other
    assert cached_folder(REPO, other).name == other  # a commit names itself
    assert cached_folder(REPO).name == COMMIT


def test_a_model_missing_from_the_cache_says_to_pull_it(cache: Path) -> None:
    with pytest.raises(ModelFilesError, match="synapse pull MODEL"):
        cached_folder("org/absent")
    with pytest.raises(ModelFilesError, match="at revision 'v9'"):
        cached_folder(REPO, "v9")


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"hf": REPO, "model_dir": "/x"}, "options.hf: name the model by hf or by model_dir"),
        ({"revision": "v1"}, "options.revision: a revision is of a hub model"),
    ],
)
def test_hub_options_are_checked(options: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(options)
    assert any(problem in line for line in caught.value.problems), caught.value.problems


@pytest.mark.parametrize(
    ("package", "advice"),
    [
        ("/models/bge", 'set options.model_dir = "/models/bge"'),
        ("BAAI/bge-small-en-v1.5", 'set options.hf = "BAAI/bge-small-en-v1.5"'),
        ("my-bge", 'set options.model_dir = "<its folder>" or options.hf = "<hub id>"'),
    ],
)
def test_a_package_naming_another_model_with_no_folder_or_hub_id_is_unavailable(
    package: str, advice: str
) -> None:
    """Without model_dir or hf the lane serves MiniLM's wheel: a catalog
    naming another model there would get MiniLM's vectors unawares. The
    model is unavailable, saying what to set; the catalog's others serve."""
    wrong = model_entry("m", transport="cpu", package=package, ceiling=256)
    labelled = model_entry("mine", transport="cpu", package="my-bge", ceiling=256)
    labelled["options"] = {"model_dir": str(TINY / "bert-cls")}
    names = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "ALL-minilm-l6-v2")
    minilm = [
        model_entry(f"w{i}", transport="cpu", package=p, ceiling=256) for i, p in enumerate(names)
    ]
    config = host_config(wrong, labelled, *minilm)
    entries = Catalog(config, PluginHost([synapse_cpu.plugin])).entries
    problem = entries["m"].problem
    assert f"cannot run here: package: {package!r} is only a label" in problem, problem
    assert advice in problem
    assert entries["mine"].available
    assert not any("only a label" in entries[f"w{i}"].problem for i in range(len(names)))


def entry(name: str, **options: Any) -> dict[str, Any]:
    return model_entry(name, task="embed", transport="cpu", ceiling=512, **options)


@pytest.mark.subprocess
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_hub_model_serves_as_its_folder_does_and_a_missing_one_is_unavailable(
    cache: Path,
) -> None:
    cfg = host_config(
        entry("by-hub", hf=REPO),
        entry("by-folder", model_dir=str(TINY / "bert-cls")),
        entry("not-pulled", hf="org/absent"),
        source="test",
        exit_grace_s=5.0,
        exchange_timeout_s=30.0,
    )
    texts = ["a first text", "and another one"]
    async with synapse.open_host(cfg, plugins=[synapse_cpu.plugin]) as host:
        deadline = synapse.Deadline.after(DEADLINE_S)
        by_hub = await host.embed("by-hub", texts, deadline=deadline)
        by_folder = await host.embed("by-folder", texts, deadline=deadline)
        with pytest.raises(synapse.Refused) as caught:
            await host.embed("not-pulled", texts, deadline=deadline)
    assert by_hub.vectors == by_folder.vectors
    assert caught.value.code == "transport-unavailable"
    assert "synapse pull MODEL" in str(caught.value)


def test_synapse_pull_names_what_it_pulled_and_refuses_other_models(
    cache: Path, tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(
        catalog_toml(
            entry("by-hub", hf=REPO, revision="main"),
            entry("by-folder", model_dir=str(TINY / "bert-cls")),
        ),
        encoding="utf-8",
    )
    cli = make_cli(lambda: synapse.PluginHost([synapse_cpu.plugin]))
    runner = CliRunner()
    # Offline and already cached: pulling finds it there, downloading nothing.
    pulled = runner.invoke(cli, ["pull", "by-hub", "--catalog", str(catalog)])
    assert pulled.exit_code == 0, pulled.output
    assert f"by-hub: {REPO} in " in pulled.output and COMMIT in pulled.output
    refused = runner.invoke(cli, ["pull", "by-folder", "--catalog", str(catalog)])
    assert refused.exit_code != 0
    assert "names no hub id" in refused.output


def test_model_flag_takes_a_hub_id_from_the_cache_and_names_pull_otherwise(cache: Path) -> None:
    cli = make_cli(lambda: synapse.PluginHost([synapse_cpu.plugin]))
    runner = CliRunner()
    env = {"SYNAPSE_CATALOG": None}
    listed = runner.invoke(cli, ["catalog", "--json", "--model", REPO], env=env)
    assert listed.exit_code == 0, listed.output
    (model,) = json.loads(listed.stdout)["models"]
    assert (model["name"], model["task"], model["available"]) == (REPO, "embed", True)
    absent = runner.invoke(cli, ["catalog", "--model", "org/absent"], env=env)
    assert absent.exit_code == 2
    assert "not in the local Hugging Face cache" in absent.output
    assert "`synapse pull org/absent`" in absent.output
    # ...which takes the hub id itself; offline and cached, it downloads nothing.
    pulled = runner.invoke(cli, ["pull", REPO], env=env)
    assert pulled.exit_code == 0, pulled.output
    assert COMMIT in pulled.output
