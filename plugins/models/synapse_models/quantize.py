"""int8: a dynamically quantized copy of a float32 graph, built once, cached,
and measured against the float32 vectors it replaces.

onnxruntime's ``quantize_dynamic`` stores the weights of the graph's matrix
products (and the embedding table) as int8 with a scale per output channel,
and quantizes activations per call; ``reduce_range`` keeps weights to 7 bits,
which avoids the saturation of the 8-bit products on CPUs without VNNI.
Two matrix products stay float32 (:func:`kept_float`): the first layer's
feed-forward down-projection and the third layer's up-projection, the two
whose quantization alone cost MiniLM most on its worst text (measured node
by node); with them kept the worst cosine to float32 went from 0.974 to
0.986 for about a tenth of the quantized work.
This is a **lossy** conversion: its vectors are close to float32's, not equal,
so its identity names it (``...:onnxruntime-int8``) and the worst cosine to
the float32 vectors on :data:`TEXTS` is measured when the graph is built and
kept next to it (``synapse catalog`` and ``/info`` show it).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

#: bump when the recipe changes: graphs of another recipe are not reused
RECIPE_VERSION = 2
RECIPE = {
    "per_channel": True,
    "reduce_range": True,
    "weight_type": "QInt8",
    "float32": "layer 1 FFN down-projection, layer 3 FFN up-projection",
}
#: (layer, projection) of the feed-forward matrix products kept in float32
#: (MiniLM's, measured; a family may name its own)
KEPT_FLOAT = ((0, "down"), (2, "up"))

_SENTENCES = (
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market fell sharply today.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "I love pizza",
    "How do I reset my password if I no longer have access to my email?",
    "The committee postponed its decision until the next quarterly meeting.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "She played the violin at the concert, and the audience stood to applaud.",
    "Ceci n'est pas une pipe.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "東京は日本の首都です。",
    "emoji 🙂🚀 and symbols #42 @home",
    "ok",
    "Refunds are issued within 14 days to the original payment method.",
)
#: the fixed texts the int8 graph is measured on: short, medium, long, other scripts
TEXTS: tuple[str, ...] = (
    *_SENTENCES,
    " ".join(_SENTENCES[:8]),
    " ".join(_SENTENCES[6:] * 2),
    " ".join(_SENTENCES),
    " ".join(reversed(_SENTENCES)),
)
#: a packed single sequence: (ids, token types, mask)
Packed = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]
Encode = Callable[[Sequence[str]], list[Packed]]


@attrs.frozen
class Loss:
    """How far the int8 outputs are from float32's on :data:`TEXTS`: the
    cosines of an embedder's vectors, or the absolute differences of a
    cross-encoder's scores (logits), whose one value has no cosine."""

    min_cosine: float | None
    mean_cosine: float | None
    texts: int
    onnxruntime: str
    max_score_delta: float | None = None
    mean_score_delta: float | None = None

    def describe(self) -> str:
        if self.max_score_delta is not None and self.mean_score_delta is not None:
            return describe_scores(self.max_score_delta, self.mean_score_delta, self.texts)
        assert self.min_cosine is not None and self.mean_cosine is not None
        return describe(self.min_cosine, self.mean_cosine, self.texts)


def describe(min_cosine: float, mean_cosine: float, texts: int = len(TEXTS)) -> str:
    """The line ``synapse catalog`` shows under an int8 embedder."""
    return (
        f"int8 (dynamic quantization, lossy): worst cosine to float32 "
        f"{min_cosine:.4f}, mean {mean_cosine:.4f} on {texts} fixed texts"
    )


def describe_scores(max_delta: float, mean_delta: float, texts: int = len(TEXTS)) -> str:
    """The line ``synapse catalog`` shows under an int8 cross-encoder."""
    return (
        f"int8 (dynamic quantization, lossy): worst score (logit) difference to float32 "
        f"{max_delta:.4f}, mean {mean_delta:.4f} on {texts} fixed texts"
    )


def int8_path(graph: Path) -> Path:
    return graph.with_name(f"{graph.stem}-int8-r{RECIPE_VERSION}.onnx")


def loss_path(cache_root: Path, key: str) -> Path:
    """Where the measured loss of an int8 graph is kept (read by the catalog),
    under its model's :func:`synapse_models.files.int8_key`."""
    return cache_root / "int8" / f"{key}-r{RECIPE_VERSION}.json"


def read_loss(cache_root: Path, key: str) -> Loss | None:
    try:
        data = json.loads(loss_path(cache_root, key).read_text(encoding="utf-8"))
        return Loss(
            _number(data["min_cosine"]),
            _number(data["mean_cosine"]),
            int(data["texts"]),
            str(data["onnxruntime"]),
            _number(data["max_score_delta"]),
            _number(data["mean_score_delta"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cached_int8(
    graph: Path,
    encode: Encode,
    cache_root: Path,
    key: str,
    kept: Sequence[tuple[int, str]] = KEPT_FLOAT,
) -> tuple[Path, Loss]:
    """The int8 graph of the float32 ``graph`` and its loss, built and measured
    if either is not cached yet; ``kept``: the family's feed-forward products
    kept in float32 (:attr:`synapse_models.families.Family.kept_float`)."""
    import onnxruntime as ort

    target = int8_path(graph)
    built = not target.is_file()
    if built and external(graph):
        _atomic_external(target, lambda aside: quantize(graph, aside, kept, external=True))
    elif built:
        _atomic(target, lambda tmp: quantize(graph, tmp, kept))
    loss = read_loss(cache_root, key)
    if built or loss is None or loss.onnxruntime != ort.__version__:
        loss = measure(graph, target, encode(TEXTS))
        data = json.dumps(attrs.asdict(loss), indent=1)
        _atomic(loss_path(cache_root, key), lambda tmp: _write(tmp, data))
    return target, loss


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def external(graph: Path) -> bool:
    """Whether ``graph`` keeps its weights in a data file beside it
    (:func:`synapse_models.onnx_file.cached_graph`: a graph past 2 GB)."""
    return graph.with_name(f"{graph.name}.data").is_file()


def quantize(
    source: Path,
    target: Path,
    kept: Sequence[tuple[int, str]] = KEPT_FLOAT,
    external: bool = False,
) -> None:
    """The int8 graph of ``source`` written to ``target``; ``external``: its
    weights go to ``<target name>.data`` beside it (a source past 2 GB)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(source))
    # quantize_dynamic tells nodes apart by name; the built graph leaves them unnamed.
    for index, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{index}"
    # quantize_dynamic advises pre-processing on the root logger: not for users.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(
            model,
            str(target),
            per_channel=True,
            reduce_range=True,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=kept_float(model, kept),
            use_external_data_format=external,
        )
    finally:
        root.setLevel(level)


def kept_float(model: Any, kept: Sequence[tuple[int, str]] = KEPT_FLOAT) -> list[str]:
    """Names of the ``kept`` matrix products of ``model``'s graph.

    A layer's feed-forward block is an up-projection (hidden to intermediate)
    followed by the one product of constant weights that narrows (intermediate
    to hidden): the ``n``-th narrowing product is layer ``n``'s down-projection,
    the product of constant weights just before it its up-projection. A graph
    with fewer layers keeps what it has.
    """
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    products = [
        (node.name, shapes[node.input[1]])
        for node in model.graph.node
        if node.op_type == "MatMul" and len(shapes.get(node.input[1], ())) == 2
    ]
    layers: list[dict[str, str]] = []
    for index, (name, (rows, cols)) in enumerate(products):
        if rows > cols and index > 0:
            layers.append({"up": products[index - 1][0], "down": name})
    return [layers[n][part] for n, part in kept if n < len(layers)]


def _number(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def measure(graph: Path, quantized: Path, sequences: Sequence[Packed]) -> Loss:
    """Cosines of each sequence's int8 vector with its float32 vector, or,
    for one value a sequence (a cross-encoder's logit), their differences."""
    import onnxruntime as ort

    from .sessions import onnx_session, usable_cores

    sessions = [onnx_session(path, usable_cores()) for path in (graph, quantized)]
    cosines, deltas = [], []
    for packed in sequences:
        exact, approx = (_embed(s, *packed) for s in sessions)
        if exact.size == 1:
            deltas.append(float(abs(exact[0] - approx[0])))
        else:
            norms = np.linalg.norm(exact) * np.linalg.norm(approx)
            cosines.append(float(exact @ approx / norms))
    version = ort.__version__
    if deltas:
        return Loss(None, None, len(deltas), version, max(deltas), float(np.mean(deltas)))
    return Loss(min(cosines), float(np.mean(cosines)), len(cosines), version)


def _embed(
    session: Any,
    ids: npt.NDArray[np.int64],
    types: npt.NDArray[np.int64],
    mask: npt.NDArray[np.float32],
) -> Any:
    feed = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    names = {i.name for i in session.get_inputs()}
    return np.atleast_1d(
        session.run(["output"], {k: v for k, v in feed.items() if k in names})[0][0]
    )


def _atomic_external(path: Path, write: Callable[[Path], None]) -> None:
    """:func:`_atomic` for a graph with a data file beside it: both are written
    in a folder aside under their final names, and the data file is renamed
    into place before the ``.onnx`` that names it."""
    import shutil

    path.parent.mkdir(parents=True, exist_ok=True)
    aside = Path(tempfile.mkdtemp(dir=path.parent, prefix=".int8-"))
    data = f"{path.name}.data"
    try:
        write(aside / path.name)
        if (aside / data).is_file():
            os.replace(aside / data, path.with_name(data))
        os.replace(aside / path.name, path)
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write aside, then rename: a concurrent worker never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, suffix=".tmp" + path.suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
