"""What the commands print: plain data for ``--json`` and lines for people.

Every listing is built once as JSON-ready data; the human form is drawn from
that data, so the two never disagree.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..call import EmbedResult, RerankResult
from ..config import HostConfig, ModelSpec
from ..naming import listed
from ..outputs import OutputsResult
from ..plugins import PluginHost
from ..transport import Transport
from .inputs import Inputs

#: values of a vector shown in the human listing
HEAD = 4
#: characters of an input shown in the human listing
CLIP = 40

Doc = dict[str, Any]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart; the last column is not padded."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, str(row[-1])]).rstrip())
    return lines


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def clip(text: str, width: int = CLIP) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


# -- embed / rerank -----------------------------------------------------------------


def embed_doc(result: EmbedResult) -> Doc:
    return {
        "model": result.model,
        "identity": result.identity,
        "dims": len(result.vectors[0]) if result.vectors else 0,
        "vectors": result.vectors,
        "truncated": list(result.truncated),
    }


def embed_lines(result: EmbedResult, inputs: Inputs) -> list[str]:
    rows = []
    for index, vector in enumerate(result.vectors):
        head = ", ".join(f"{v:+.4f}" for v in vector[:HEAD])
        more = ", ..." if len(vector) > HEAD else ""
        norm = math.sqrt(sum(v * v for v in vector))
        text = clip(inputs.items[index])
        rows.append([str(index), str(len(vector)), f"{norm:.4f}", f"[{head}{more}]", text])
    title = f"{result.model}: {count(len(rows), 'vector')}, identity {result.identity}"
    header = ["index", "dims", "norm", "first values", "text"]
    return [title, *table(header, rows), *cut_lines(result.truncated, "input")]


def outputs_doc(result: OutputsResult) -> Doc:
    """``--sparse``: each vector as ``{indices, values}``; ``--all``: each
    input's token vectors."""
    doc: Doc = {"model": result.model, "identity": result.identity}
    if result.sparse is not None:
        doc["sparse"] = [{"indices": v.indices, "values": v.values} for v in result.sparse]
    if result.multi is not None:
        doc["multi"] = [[list(map(float, v)) for v in rows] for rows in result.multi]
    doc["truncated"] = list(result.truncated)
    return doc


def outputs_lines(result: OutputsResult, inputs: Inputs) -> list[str]:
    """One line per input: a sparse vector's size and heaviest weights, or
    the count and width of its token vectors."""
    rows = []
    if result.sparse is not None:
        for index, vector in enumerate(result.sparse):
            top = sorted(zip(vector.values, vector.indices, strict=True), reverse=True)[:HEAD]
            shown = ", ".join(f"{i}:{v:.4f}" for v, i in top)
            more = ", ..." if len(vector.indices) > HEAD else ""
            text = clip(inputs.items[index])
            rows.append([str(index), str(len(vector.indices)), f"[{shown}{more}]", text])
        header = ["index", "nonzero", "heaviest (index:weight)", "text"]
        noun = "sparse vector"
    else:
        for index, vectors in enumerate(result.multi or []):
            width = len(vectors[0]) if len(vectors) else 0
            rows.append([str(index), str(len(vectors)), str(width), clip(inputs.items[index])])
        header, noun = ["index", "tokens", "dims", "text"], "token-vector list"
    title = f"{result.model}: {count(len(rows), noun)}, identity {result.identity}"
    return [title, *table(header, rows), *cut_lines(result.truncated, "input")]


#: inputs a "cut" line names before it counts the rest
CUT_SHOWN = 20


def cut_lines(truncated: Sequence[int], noun: str, name: Callable[[int], str] = str) -> list[str]:
    """The line naming the inputs ``--truncate`` cut (``name`` of each index),
    if it cut any: the first :data:`CUT_SHOWN`, then how many more."""
    if not truncated:
        return []
    named = listed([name(i) for i in truncated], CUT_SHOWN)
    return [f"cut to the model's ceiling (--truncate): {f'{noun} ' if noun else ''}{named}"]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


def similarity_doc(result: EmbedResult, inputs: Inputs) -> Doc:
    first, *others = result.vectors
    return {
        "model": result.model,
        "identity": result.identity,
        "first": inputs.items[0],
        "similarities": [
            {"text": text, "cosine": cosine(first, vector)}
            for text, vector in zip(inputs.items[1:], others, strict=True)
        ],
        "truncated": list(result.truncated),
    }


def similarity_lines(result: EmbedResult, inputs: Inputs) -> list[str]:
    doc = similarity_doc(result, inputs)
    rows = [[f"{s['cosine']:+.4f}", clip(s["text"])] for s in doc["similarities"]]
    title = f"{result.model}: cosine similarity with {clip(inputs.items[0])!r}"
    return [
        title,
        *table(["cosine", "text"], rows),
        f"identity {result.identity}",
        # No index column here: each text cut is named by its words.
        *cut_lines(result.truncated, "", lambda i: repr(clip(inputs.items[i]))),
    ]


def rerank_doc(result: RerankResult, query: str) -> Doc:
    return {
        "model": result.model,
        "identity": result.identity,
        "query": query,
        "scores": result.scores,
        "truncated": list(result.truncated),
    }


def rerank_lines(result: RerankResult, query: str, inputs: Inputs) -> list[str]:
    # Highest score first; equal scores keep their input order.
    order = sorted(range(len(result.scores)), key=lambda i: (-result.scores[i], i))
    rows = [
        [str(rank), str(i), f"{result.scores[i]:.4f}", clip(inputs.items[i])]
        for rank, i in enumerate(order, start=1)
    ]
    documents = count(len(rows), "document")
    title = f"{result.model}: {documents} for {clip(query)!r}, identity {result.identity}"
    header = ["rank", "index", "score", "document"]
    return [title, *table(header, rows), *cut_lines(result.truncated, "document")]


# -- catalog ----------------------------------------------------------------------------


def plugins_doc(plugins: PluginHost, config: HostConfig, selected: set[str] | None) -> Doc:
    infos = [
        {
            "name": info.name,
            "distribution": info.distribution,
            "version": info.version,
            "hooks": list(info.hooks),
            "error": info.error,
        }
        for info in plugins.infos
    ]
    transports = [
        {
            "name": name,
            "plugin": t.plugin,
            "available": t.availability.available,
            "reason": t.availability.reason,
            "details": _describe(t.transport),
            "models": [m.name for m in _served(config, t.transport) if m.transport == name],
        }
        for name, t in sorted(plugins.transports().items())
    ]
    shown = {f"plugin {info.name!r}: {info.error}" for info in plugins.infos if info.error}
    return {
        "selected": sorted(selected) if selected is not None else None,
        "plugins": infos,
        "transports": transports,
        "problems": [p for p in plugins.problems if p not in shown],
    }


def plugins_lines(doc: Doc) -> list[str]:
    lines: list[str] = []
    selected = doc["selected"]
    if not doc["plugins"]:
        if selected == []:
            lines.append("No plugins loaded: SYNAPSE_PLUGINS is set and empty.")
        elif selected:
            lines.append(f"No plugins loaded: SYNAPSE_PLUGINS={','.join(selected)} matched none.")
        else:
            lines.append("No plugins installed.")
    else:
        limit = f" (SYNAPSE_PLUGINS={','.join(selected)})" if selected is not None else ""
        lines.append(f"Plugins{limit}:")
        for p in doc["plugins"]:
            origin = " ".join(x for x in (p["distribution"], p["version"]) if x)
            lines.append(f"  {p['name']}" + (f"  {origin}" if origin else ""))
            if p["error"]:
                lines.append(f"    error: {p['error']}")
            else:
                lines.append(f"    hooks: {', '.join(p['hooks']) or '(none)'}")
        missing = sorted(set(selected or ()) - {p["name"] for p in doc["plugins"]})
        if missing:
            lines.append(f"  not installed but named in SYNAPSE_PLUGINS: {', '.join(missing)}")
    if doc["transports"]:
        lines.append("Transports:")
        for t in doc["transports"]:
            status = "available" if t["available"] else f"unavailable: {t['reason']}"
            models = ", ".join(t["models"]) or "none"
            lines.append(f"  {t['name']}  {status}")
            if t["details"]:
                lines.append(f"    {t['details']}")
            lines.append(f"    plugin {t['plugin']}; catalog models: {models}")
    else:
        lines.append(
            "No transports: no model can run. Install a transport plugin "
            "(e.g. synapse-mock-transport) or check SYNAPSE_PLUGINS."
        )
    if doc["problems"]:
        lines.append("Problems:")
        lines.extend(f"  {problem}" for problem in doc["problems"])
    return lines


def _describe(transport: Transport) -> str:
    try:
        return transport.describe()
    except Exception as exc:  # a diagnostic listing goes on
        return f"describe() failed: {exc!r}"


def _served(config: HostConfig, transport: Transport) -> tuple[ModelSpec, ...]:
    """The catalog's models plus those the transport ships, as a host would see them."""
    try:
        shipped = tuple(transport.catalog_models())
    except Exception:  # reported by the plugin host; listing goes on
        shipped = ()
    return config.with_models(shipped).models
