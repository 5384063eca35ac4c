"""Classifiers served: ``Host.classify``, TEI's ``POST /predict`` and
``synapse classify``, on the tiny seeded BERT classifiers of
``plugins/models/tests/data/classifier`` through real CPU workers.

No transformers output exists here. The logits these folders give on both
runtimes equal a float64 re-implementation of BERT
(``plugins/models/tests/test_classifier.py``); here the reference is the
numpy runtime's logits computed in this process, and the probabilities are
computed from them in the test (softmax, or each label's sigmoid for the
multi-label folder), as transformers' text-classification pipeline does.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

import synapse_core as synapse
import synapse_cpu.plugin
from synapse_core.cli import make_cli
from synapse_core.testing import host_config, model_entry
from synapse_models import model as runtime

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]

DATA = Path(__file__).parents[2] / "models" / "tests" / "data" / "classifier"
SINGLE, MULTI = DATA / "bert-classify", DATA / "bert-multilabel"
RERANK = Path(__file__).parents[2] / "models" / "tests" / "data" / "tiny-models" / "bert-rerank"
LONG = " ".join(["word"] * 200)  # over the folders' ceiling of 128
INPUTS: list[Any] = [
    ("A man is eating food.", "A man eats."),
    "What is the capital of France?",
    ("The market fell.", "Stocks rose."),
    ("A man is eating food.", "Nobody is eating."),
    "stocks fell",
]
DEADLINE_S = 60.0  # bounds a broken worker; not a timing claim
config = functools.partial(host_config, source="test", exit_grace_s=5.0, exchange_timeout_s=30.0)


def entry(name: str, folder: Path, task: str = "classify") -> dict[str, Any]:
    return model_entry(
        name, task=task, transport="cpu", ceiling=512, model_dir=str(folder), runtime="numpy"
    )


def expected_logits(folder: Path, inputs: list[Any]) -> np.ndarray:
    loaded = runtime.load(str(folder), runtime="numpy")
    encode = loaded.tokenizer.encode
    rows = []
    for item in inputs:
        if isinstance(item, str):
            rows.append(loaded.classify(None, [encode(item)])[0])
        else:
            rows.append(loaded.classify(encode(item[0]), [encode(item[1])])[0])
    return np.array(rows, dtype=np.float64)


def probabilities(logits: np.ndarray, multi_label: bool) -> np.ndarray:
    if multi_label:
        out: np.ndarray = 1.0 / (1.0 + np.exp(-logits))
        return out
    exps = np.exp(logits - logits.max(axis=1, keepdims=True))
    return exps / exps.sum(axis=1, keepdims=True)


def labels_of(folder: Path) -> list[str]:
    config_json = json.loads((folder / "config.json").read_text())
    return [config_json["id2label"][str(i)] for i in range(len(config_json["id2label"]))]


def check(predictions: list[list[Any]], folder: Path, multi: bool, raw: bool = False) -> None:
    """``predictions`` (per input, ``(label, score)`` best first) are the
    reference's, in input order."""
    logits = expected_logits(folder, INPUTS)
    scores = logits if raw else probabilities(logits, multi)
    labels = labels_of(folder)
    assert len(predictions) == len(INPUTS)
    for row, predicted in zip(scores, predictions, strict=True):
        order = np.argsort(-row, kind="stable")
        assert [label for label, _ in predicted] == [labels[i] for i in order]
        np.testing.assert_allclose([s for _, s in predicted], row[order], atol=1e-5, rtol=0)


def host(cfg: synapse.HostConfig) -> Any:
    return synapse.open_host(cfg, plugins=[synapse_cpu.plugin])


async def test_host_classify_gives_each_inputs_labels_best_first() -> None:
    deadline = synapse.Deadline.after(DEADLINE_S)
    async with host(config(entry("c", SINGLE), entry("m", MULTI))) as h:
        single = await h.classify("c", INPUTS, deadline=deadline)
        raw = await h.classify("c", INPUTS, raw_scores=True, deadline=deadline)
        multi = await h.classify("m", INPUTS, deadline=deadline)
        one = await h.classify("c", "stocks fell", deadline=deadline)
    for result, folder, is_multi, is_raw in (
        (single, SINGLE, False, False),
        (raw, SINGLE, False, True),
        (multi, MULTI, True, False),
    ):
        pairs = [[(p.label, p.score) for p in row] for row in result.predictions]
        check(pairs, folder, is_multi, is_raw)
    assert abs(sum(p.score for p in single.predictions[0]) - 1.0) < 1e-6
    assert sum(p.score for p in multi.predictions[0]) > 1.0  # independent labels
    assert one.predictions == [single.predictions[4]]
    assert ":bert-classifier4:" in single.identity
    np.testing.assert_allclose(raw.logits, expected_logits(SINGLE, INPUTS), atol=1e-5)


async def test_refusals_name_the_input_in_the_whole_call_and_truncate_cuts() -> None:
    deadline = synapse.Deadline.after(DEADLINE_S)
    over = [*INPUTS, "fine", ("A man is eating food.", LONG)]
    async with host(config(entry("c", SINGLE), entry("r", RERANK, "rerank"))) as h:
        with pytest.raises(synapse.Refused) as refused:
            await h.classify("c", over, deadline=deadline)
        assert refused.value.code == "over-ceiling" and refused.value.index == 6
        assert refused.value.message.startswith("pair 6 has ")
        with pytest.raises(synapse.Refused) as empty:
            await h.classify("c", [*INPUTS, ("a", "")], deadline=deadline)
        assert empty.value.code == "empty-sequence" and empty.value.index == 5
        assert "second text of pair 5" in empty.value.message
        cut = await h.classify("c", over, truncate=True, deadline=deadline)
        assert cut.truncated == (6,) and len(cut.predictions) == 7
        with pytest.raises(synapse.Refused) as wrong:
            await h.classify("r", ["a"], deadline=deadline)
        assert wrong.value.code == "wrong-task"
        with pytest.raises(synapse.Refused) as no_inputs:
            await h.classify("c", [], deadline=deadline)
        assert no_inputs.value.code == "empty-input"


async def test_a_classifier_given_another_task_is_unavailable_saying_classify() -> None:
    async with host(config(entry("c", SINGLE, "embed"), entry("r", RERANK, "classify"))) as h:
        entries = h.catalog.entries
        assert 'task = "classify"' in (entries["c"].problem or "")
        assert 'task = "rerank"' in (entries["r"].problem or "")
        with pytest.raises(synapse.Refused) as refused:
            await h.embed("c", ["a"])
        assert refused.value.code == "transport-unavailable"


async def test_predict_answers_teis_shapes() -> None:
    pytest.importorskip("synapse_http")
    import httpx

    from synapse_http import create_app

    async with host(config(entry("c", SINGLE), entry("m", MULTI))) as h:
        transport = httpx.ASGITransport(app=create_app(h))
        async with httpx.AsyncClient(transport=transport, base_url="http://synapse") as http:
            batch = await http.post("/predict?model=c", json={"inputs": INPUTS})
            multi = await http.post("/predict?model=m", json={"inputs": INPUTS})
            text = await http.post("/predict?model=c", json={"inputs": INPUTS[1]})
            pair = await http.post("/predict?model=c", json={"inputs": list(INPUTS[0])})
            served = await http.post("/?model=c", json={"inputs": INPUTS[1], "raw_scores": True})
            over = await http.post("/predict?model=c", json={"inputs": [["a", LONG]]})
            info = (await http.get("/info?model=m")).json()
    assert batch.status_code == 200, batch.text
    rows = [[(p["label"], p["score"]) for p in row] for row in batch.json()]
    check(rows, SINGLE, multi=False)
    check([[(p["label"], p["score"]) for p in row] for row in multi.json()], MULTI, multi=True)
    # One text: one list of labels, not a batch; a list of two texts is one
    # pair, as TEI reads it (batched with others, its floats may differ in the last bits).
    for one, of_batch in ((text.json(), batch.json()[1]), (pair.json(), batch.json()[0])):
        assert [p["label"] for p in one] == [p["label"] for p in of_batch]
        assert [p["score"] for p in one] == pytest.approx([p["score"] for p in of_batch], abs=1e-6)
    raw = expected_logits(SINGLE, [INPUTS[1]])[0]
    assert [p["score"] for p in served.json()] == pytest.approx(sorted(raw, reverse=True), abs=1e-5)
    assert over.status_code == 422 and over.json()["error_type"] == "over-ceiling"
    assert info["model_type"]["classifier"]["id2label"] == {
        str(i): label for i, label in enumerate(labels_of(MULTI))
    }


def test_synapse_classify_prints_labels_best_first(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    texts = [INPUTS[1], INPUTS[4]]
    printed = CliRunner().invoke(
        make_cli(), ["classify", "--model", str(MULTI), "--json", *texts], env=env
    )
    assert printed.exit_code == 0, printed.output
    doc = json.loads(printed.output)
    rows = [[(p["label"], p["score"]) for p in item["labels"]] for item in doc["inputs"]]
    logits = expected_logits(MULTI, texts)
    expected = probabilities(logits, multi_label=True)
    for row, predicted in zip(expected, rows, strict=True):
        assert [s for _, s in predicted] == pytest.approx(sorted(row, reverse=True), abs=1e-5)
    pair = CliRunner().invoke(
        make_cli(), ["classify", "--model", str(SINGLE), "--pair", *INPUTS[0]], env=env
    )
    assert pair.exit_code == 0, pair.output
    best = max(
        zip(
            probabilities(expected_logits(SINGLE, [INPUTS[0]]), False)[0],
            labels_of(SINGLE),
            strict=True,
        )
    )
    assert pair.output.splitlines()[2].split() == [best[1], f"{best[0]:.4f}"]
    odd = CliRunner().invoke(
        make_cli(), ["classify", "--model", str(SINGLE), "--pair", "a"], env=env
    )
    assert odd.exit_code != 0 and "two at a time" in odd.output
