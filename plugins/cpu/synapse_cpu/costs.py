"""What a CPU worker costs its lane, in MiB: the lane's capacity is memory.

A worker's weights are charged once, with the first shape it admits (see
:func:`charges_weights`); each admitted shape adds its working set: the
activations of one forward slice of that bucket at the worker's batch size.
An onnxruntime worker holds one session per thread count its requests run
on, each with its own copy of the weights and its own memory arena, so both
are charged once per session it may make (:func:`copies`). Estimates, on
the generous side: they guard the machine, not the last MiB; a test holds a
real worker's resident memory within them.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from synapse_core.plugin import Shape

if TYPE_CHECKING:
    from synapse_core.policy import LaneView

MIB = 1 << 20
#: interpreter, numpy, tokenizers and BLAS buffers of a loaded worker
RUNTIME_MIB = {"numpy": 48, "onnxruntime": 80}
HIDDEN, HEADS, INTERMEDIATE = 384, 12, 1536  # MiniLM-L6; other BERTs scale from the file
#: positions ([CLS] and [SEP] included) per second of one MiniLM-L6 worker on
#: one thread, by runtime, as measured (benchmarks: cpu_tokens_per_s and
#: cpu_onnx_tokens_per_s, about 2,160 and 3,550 on the reference machine)
POSITIONS_PER_S = {"numpy": 2100, "onnxruntime": 3500}
#: the longest one request should take, so a call waits little for another's
REQUEST_S = 0.1


def request_budget(runtime: str) -> int:
    """The default ``max_batch_tokens``: the positions one request of
    ``runtime`` runs in about :data:`REQUEST_S` (one bucket-256 text is over
    it on numpy; a request always holds at least one text)."""
    return int(POSITIONS_PER_S.get(runtime, POSITIONS_PER_S["numpy"]) * REQUEST_S)


def default_capacity_mib() -> int:
    """Half of this machine's memory, in MiB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - every Linux and macOS answers
        total = 8 << 30
    return max(1, total // 2 // MIB)


def copies(runtime: str, threads: int | None, cores: int) -> int:
    """How many sessions (each with its working memory) one worker may hold.
    numpy: one. onnxruntime: one session per thread count its
    requests run on (a session's intra-op pool is fixed when it is made): a
    fixed ``options.threads`` is one count; the lane's core share gives
    ``cores // busy`` for 1 to ``cores`` busy workers, as many counts as
    that has distinct values (2 on 2 cores, 7 on 16, 15 on 64)."""
    if runtime != "onnxruntime" or threads is not None:
        return 1
    return len({cores // busy for busy in range(1, max(1, cores) + 1)})


#: what each onnxruntime session past the first adds to a worker besides its
#: arena, as a share of the weights: the sessions map one pre-packed copy of
#: the weights (``synapse_models.packed_graph``), and a session packs only
#: what the file cannot hold (int8 kernels' weights; measured on MiniLM:
#: 5 MiB of 87 in float32, 10 in int8)
SESSION_SHARE = 0.15
#: and at least this much
SESSION_MIB = 8


def weights_mib(weights_bytes: int, runtime: str, copies: int = 1) -> int:
    """The runtime's own memory, the weights once (the sessions share one
    mapped copy) and what each of ``copies - 1`` further sessions adds."""
    runtime_mib = RUNTIME_MIB.get(runtime, RUNTIME_MIB["numpy"])
    weights = math.ceil(weights_bytes / MIB)
    per_session = max(SESSION_MIB, math.ceil(weights * SESSION_SHARE))
    return weights + (copies - 1) * per_session + runtime_mib


def shape_mib(shape: Shape, batch_tokens: int, hidden: int = HIDDEN, copies: int = 1) -> int:
    """The activations of one forward slice of ``shape``, in float32, held
    by each of ``copies`` (an onnxruntime session's arena keeps what its
    largest run needed)."""
    rows = min(shape.batch, max(1, batch_tokens // shape.bucket))
    positions = rows * shape.bucket
    heads = max(1, hidden // 32)
    # At the MLP's peak: the hidden states, the 4x widened rows and the three
    # temporaries of their GELU; in attention: the scores, softmaxed in place.
    floats = positions * hidden * 18 + rows * heads * shape.bucket**2
    return copies * (math.ceil(floats * 4 / MIB) + 1)


def charges_weights(
    worker_id: str,
    lane: LaneView,
    weights: int,
    batch_tokens: int,
    hidden: int = HIDDEN,
    copies: int = 1,
) -> bool:
    """Whether the worker's next admission must carry its weights: none of its
    reservations on the lane carries them now (all cost only their working set)."""
    return not any(
        r.worker_id == worker_id
        and r.units >= shape_mib(r.shape, batch_tokens, hidden, copies) + weights
        for r in lane.reservations
    )
