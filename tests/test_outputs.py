"""Typed outputs through the core: the wire's ragged layout, the worker kit's
packing and checks, and calls for sparse and token vectors (and several
outputs at once) served in input order from one forward pass per request."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

import synapse_core as synapse
from synapse_core.config import ModelSpec
from synapse_core.errors import Refused, WireError
from synapse_core.kinds import check_part, pack_indices, pack_ragged
from synapse_core.testing import transport_plugin
from synapse_core.testing.fake import InProcessFakeTransport
from synapse_core.testing.fake_worker import FakeWorker
from synapse_core.tokenizer import VOCAB
from synapse_core.transport import Launched, LaunchRequest, ModelTraits
from synapse_core.wire import (
    Codec,
    Infer,
    Kind,
    Output,
    Part,
    Shape,
    expect_output,
    more_rows,
    pack_rows,
    rows_of,
)

pytestmark = pytest.mark.anyio

MULTI_WIDTH = 3


def sparse_of(seq: Sequence[int]) -> tuple[list[int], list[float]]:
    """The test worker's sparse vector: each distinct token, weighted by its count."""
    ids = sorted(set(seq))
    return ids, [float(seq.count(t)) for t in ids]


def multi_of(seq: Sequence[int]) -> list[list[float]]:
    return [[float(t), float(i), 1.0] for i, t in enumerate(seq)]


class OutputsWorker(FakeWorker):
    """The fake worker with sparse and multi-vector outputs; counts its passes."""

    passes: list[int] = []

    def load(self, options: Any) -> None:
        super().load(options)
        self.widths = {Kind.SPARSE: VOCAB, Kind.MULTI: MULTI_WIDTH}

    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        self.passes.append(len(batch))
        return super().embed(batch)

    def sparse(self, batch: list[list[int]]) -> list[tuple[list[int], list[float]]]:
        self.passes.append(len(batch))
        return [sparse_of(seq) for seq in batch]

    def multi(self, batch: list[list[int]]) -> list[list[list[float]]]:
        self.passes.append(len(batch))
        return [multi_of(seq) for seq in batch]

    def outputs(self, batch: list[list[int]], kinds: Sequence[Kind]) -> list[Any]:
        self.passes.append(len(batch))  # one forward pass for them all
        made = {
            Kind.DENSE: super().embed(batch),
            Kind.SPARSE: [sparse_of(seq) for seq in batch],
            Kind.MULTI: [multi_of(seq) for seq in batch],
        }
        return [made[kind] for kind in kinds]


class OldPeerWorker(FakeWorker):
    """A worker of protocol 2: its hello names no outputs."""

    def output_widths(self) -> dict[Kind, int]:
        return {}


class OutputsTransport(InProcessFakeTransport):
    worker_class: type[FakeWorker] = OutputsWorker
    outputs: frozenset[Kind] | None = None

    async def launch(self, request: LaunchRequest) -> Launched:
        return self.start_worker(request, self.worker_class, 6_200_000)

    def traits(self, model: ModelSpec) -> ModelTraits:
        return ModelTraits(outputs=self.outputs)


def test_a_ragged_output_round_trips_on_the_wire() -> None:
    rows = [sparse_of([5, 7, 5]), sparse_of([9])]
    sparse = Part(
        Kind.SPARSE,
        VOCAB,
        pack_rows([rows[0][1] + rows[1][1]]),
        pack_ragged([2, 1]),
        pack_indices(rows[0][0] + rows[1][0]),
    )
    vectors = [multi_of([5, 7, 5]), multi_of([9])]
    output = Output(
        3,
        Shape(8, 2),
        2,
        MULTI_WIDTH,
        pack_rows(vectors[0] + vectors[1]),
        Kind.MULTI,
        pack_ragged([3, 1]),
        more=[sparse],
    )
    codec = Codec()
    decoded = codec.decode(codec.encode(output)[4:])
    assert decoded == output
    request = Infer(3, Shape(8, 2), "embed", [[5, 7, 5], [9]], outputs=[Kind.MULTI, Kind.SPARSE])
    checked = expect_output(decoded, request, 2, MULTI_WIDTH, (VOCAB,))
    assert rows_of(checked) == vectors
    assert more_rows(checked) == [[([5, 7], [2.0, 1.0]), ([9], [1.0])]]


def test_an_old_peers_hello_and_infer_still_decode() -> None:
    # A protocol-2 peer sends neither outputs nor kinds; both default.
    fields = {"request_id": 1, "shape": [8, 1], "task": "embed", "sequences": [[1]]}
    old = msgspec.msgpack.encode({"t": "infer", **fields})
    frame = Codec().decode(old)
    assert isinstance(frame, Infer) and frame.outputs == []


@pytest.mark.parametrize(
    ("kind", "dims", "data", "lengths", "indices", "problem"),
    [
        (Kind.SPARSE, 10, pack_rows([[1.0]]), pack_ragged([1]), pack_indices([10]), "outside"),
        (Kind.SPARSE, 10, pack_rows([[1.0]]), pack_ragged([1]), pack_indices([-1]), "outside"),
        (Kind.SPARSE, 10, pack_rows([[1.0, 2.0]]), pack_ragged([2]), pack_indices([3, 3]), "twice"),
        (Kind.SPARSE, 10, pack_rows([[1.0]]), pack_ragged([2]), pack_indices([3]), "bytes"),
        (Kind.SPARSE, 10, pack_rows([[math.nan]]), pack_ragged([1]), pack_indices([3]), "NaN"),
        (Kind.MULTI, 1, pack_rows([[1.0]] * 9), pack_ragged([9]), b"", "exceeds bucket 8"),
        (Kind.MULTI, 2, pack_rows([[1.0, 2.0]]), pack_ragged([2]), b"", "bytes"),
        (Kind.MULTI, 1, pack_rows([[1.0]]), b"", b"", "row lengths"),
        (Kind.DENSE, 1, pack_rows([[1.0]]), pack_ragged([1]), b"", "row lengths"),
    ],
)
def test_a_malformed_ragged_output_is_refused(
    kind: Kind, dims: int, data: bytes, lengths: bytes, indices: bytes, problem: str
) -> None:
    with pytest.raises(WireError, match=problem):
        check_part(kind, 1, dims, data, lengths, indices, bucket=8)


def test_a_reply_with_other_outputs_than_asked_is_malformed() -> None:
    request = Infer(3, Shape(8, 1), "embed", [[5]], outputs=[Kind.DENSE, Kind.SPARSE])
    only_dense = Output(3, Shape(8, 1), 1, 4, pack_rows([[1.0] * 4]), Kind.DENSE)
    with pytest.raises(WireError, match="expected"):
        expect_output(only_dense, request, 1, 4, (VOCAB,))


def opened(config: Any, transport: OutputsTransport) -> Any:
    return synapse.open_host(config, plugins=[transport_plugin(transport)])


TEXTS = ["alpha", "a much longer text than the others, with many more words in it", "b c", "d"]


async def test_sparse_and_token_vectors_come_back_in_input_order_from_one_pass_per_request(
    make_model: Any, make_config: Any
) -> None:
    OutputsWorker.passes = []
    transport = OutputsTransport()
    config = make_config(make_model("m"))
    async with synapse.open_host(config, plugins=[transport_plugin(transport)]) as host:
        tokenizer = host.catalog.entries["m"].tokenizer
        ids = [tokenizer.encode(t) for t in TEXTS]
        result = await host.embed_outputs("m", TEXTS, [Kind.DENSE, Kind.SPARSE, Kind.MULTI])
        # several requests (batches of two, two buckets), each text in one
        # pass that computed all three outputs
        assert len(OutputsWorker.passes) > 1
        assert sum(OutputsWorker.passes) == len(TEXTS)
        dense = (await host.embed("m", TEXTS)).vectors
    assert result.dense == dense
    assert result.sparse == [synapse_sparse(sparse_of(s)) for s in ids]
    assert result.multi == [multi_of(s) for s in ids]
    assert result.tokens == sum(len(s) for s in ids)


def synapse_sparse(row: tuple[list[int], list[float]]) -> Any:
    from synapse_core.outputs import SparseVector

    return SparseVector(*row)


async def test_one_output_alone_is_its_own_method(make_model: Any, make_config: Any) -> None:
    OutputsWorker.passes = []
    async with synapse.open_host(
        make_config(make_model("m")), plugins=[transport_plugin(OutputsTransport())]
    ) as host:
        vectors = await host.embed_sparse("m", ["x y x"])
        tokens = await host.embed_all("m", ["x y x"])
    ids = synapse_tokens(host, "x y x")
    assert vectors == [synapse_sparse(sparse_of(ids))]
    assert tokens == [multi_of(ids)]
    assert OutputsWorker.passes == [1, 1]


def synapse_tokens(host: Any, text: str) -> list[int]:
    return list(host.catalog.entries["m"].tokenizer.encode(text))


async def test_an_output_the_files_lack_is_refused_before_a_worker_starts(
    make_model: Any, make_config: Any
) -> None:
    transport = OutputsTransport()
    transport.outputs = frozenset({Kind.DENSE})
    async with synapse.open_host(
        make_config(make_model("m")), plugins=[transport_plugin(transport)]
    ) as host:
        with pytest.raises(Refused) as refused:
            await host.embed_sparse("m", ["x"])
        assert refused.value.code == "unsupported-output"
        assert host.worker("m") is None  # nothing started


async def test_an_old_peer_serves_its_task_and_refuses_other_outputs(
    make_model: Any, make_config: Any
) -> None:
    transport = OutputsTransport()
    transport.worker_class = OldPeerWorker
    async with synapse.open_host(
        make_config(make_model("m")), plugins=[transport_plugin(transport)]
    ) as host:
        assert len((await host.embed("m", ["x"])).vectors[0]) == 4
        with pytest.raises(Refused) as refused:
            await host.embed_all("m", ["x"])
        assert refused.value.code == "unsupported-output"
        worker = host.worker("m")
        assert worker is not None and worker.generation == 1  # not taken for broken
        assert host.snapshot() == host.snapshot()


async def test_a_worker_whose_sparse_row_is_malformed_answers_bad_output(
    make_model: Any, make_config: Any
) -> None:
    class Twice(OutputsWorker):
        def sparse(self, batch: list[list[int]]) -> list[tuple[list[int], list[float]]]:
            return [([1, 1], [1.0, 2.0]) for _ in batch]

    transport = OutputsTransport()
    transport.worker_class = Twice
    async with synapse.open_host(
        make_config(make_model("m")), plugins=[transport_plugin(transport)]
    ) as host:
        with pytest.raises(synapse.WorkerFault, match=r"bad-output.*twice"):
            await host.embed_sparse("m", ["x"])
        worker = host.worker("m")
        assert worker is not None and worker.generation == 1
