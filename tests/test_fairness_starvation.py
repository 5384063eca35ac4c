"""The starvation scenario, on real worker processes: one bulk call of long
texts at its request budget, and short calls from clients that keep coming.

Bounded in calls and time. Checked by order, from request ids: the worker's
trace gives the order it received requests in, and each short call takes a
request id as it starts and as it ends, so the bulk requests begun while it
was under way are known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import synapse_core as synapse
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import FakeTransport
from synapse_core.testing.fake_worker import fake_vector
from synapse_core.tokenizer import BasicTokenizer

pytestmark = [pytest.mark.anyio, pytest.mark.subprocess]

BULK = [f"bulk{i} " * 20 for i in range(8)]  # bucket 32: one text per request
CLIENTS = 2
#: shorts per client at most: the bulk call ends long before
MOST_SHORTS = 40


async def test_starvation_short_calls_are_served_between_the_bulk_calls_requests(
    tmp_path: Path, make_model: Any, make_config: Any
) -> None:
    trace = tmp_path / "trace.jsonl"
    entry = make_model("m", max_batch=32, trace=str(trace), faults={"reply_delay_s": 0.1})
    cfg = make_config({**entry, "max_batch_tokens": 32})
    spans: list[tuple[int, int]] = []  # per short call: request ids taken at start and end
    bulk: dict[str, Any] = {}
    with anyio.fail_after(60):
        await serve(cfg, spans, bulk)
    infers = [r for r in map(json.loads, trace.read_text().splitlines()) if r["frame"] == "infer"]
    bulk_infers = [r for r in infers if r["shape"][0] == 32][1:]  # after the warm-up's
    bulk_ids = [r["request_id"] for r in bulk_infers]
    short_ids = [r["request_id"] for r in infers if r["shape"][0] == 8][1:]
    # The bulk call: cut into one request per text, in input order, none replayed.
    assert [r["rows"] for r in bulk_infers] == [1] * len(BULK)
    assert bulk["result"].vectors == [pytest.approx(vector(t), abs=1e-6) for t in BULK]
    # Short calls were served between the bulk call's requests...
    inside = [i for i in short_ids if bulk_ids[0] < i < bulk_ids[-1]]
    assert len(inside) >= CLIENTS
    # ... and none waited behind more of it than the request under way when
    # it came (plus one begun as it came, and one as its reply was read).
    assert spans
    for start, end in spans:
        assert sum(start < i < end for i in bulk_ids) <= 2, (start, end, bulk_ids)


async def serve(
    cfg: synapse.HostConfig, spans: list[tuple[int, int]], bulk: dict[str, Any]
) -> None:
    """The bulk call and the short calls' clients, on one host."""
    async with synapse.open_host(cfg, plugins=[transport_plugin(FakeTransport())]) as host:
        await host.embed("m", [BULK[0], "warm"])  # both shapes admitted
        supervisor = host.supervisors["fake:0"]
        done = anyio.Event()
        deadline = synapse.Deadline.after(50)

        async def run_bulk() -> None:
            bulk["result"] = await host.embed("m", BULK, deadline=deadline)
            done.set()

        async def client(index: int) -> None:
            for n in range(MOST_SHORTS):
                if done.is_set():
                    return
                start = supervisor.next_request_id()
                text = f"short {index} {n}"
                result = await host.embed("m", [text], deadline=deadline)
                assert result.vectors[0] == pytest.approx(vector(text), abs=1e-6)
                if not done.is_set():
                    spans.append((start, supervisor.next_request_id()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_bulk)
            for index in range(CLIENTS):
                tg.start_soon(client, index)


def vector(text: str) -> list[float]:
    return fake_vector(BasicTokenizer().encode(text), 4)
