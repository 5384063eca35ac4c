"""What ``synapse catalog`` prints: each model, where it runs, its buckets and
whether it can run here, with a note on each (its scorer, prompts, the sizes
it may be cut to...)."""

from __future__ import annotations

import bisect

from ..catalog import Catalog, Entry
from ..matryoshka import matryoshka_sizes
from .render import Doc, table


def catalog_doc(catalog: Catalog) -> Doc:
    models = []
    for name, entry in catalog.entries.items():
        spec = entry.spec
        models.append(
            {
                "name": name,
                "task": spec.task,
                "transport": spec.transport,
                "package": spec.package,
                "lane": entry.lane.lane_id if entry.lane else None,
                "workers": spec.workers,
                # The effective ceiling: capped by the largest bucket when the
                # transport declares its buckets before a worker starts.
                "ceiling": entry.ceiling,
                "catalog_ceiling": spec.ceiling,
                "buckets": _usable(entry.buckets, entry.ceiling),
                "available": entry.available,
                "problem": entry.problem,
                "description": spec.description,
                "note": _model_note(entry),
                "prompts": dict(spec.prompts),
                "scorer": entry.traits.scorer,
                "instruction": entry.traits.instruction,
                "matryoshka_dims": list(matryoshka_sizes(entry)),
                "shipped_by": catalog.shipped.get(name),
            }
        )
    return {"source": catalog.source, "models": models}


def _usable(buckets: tuple[int, ...] | None, ceiling: int) -> list[int] | None:
    """The buckets a call can use: none past the first that holds the ceiling
    (a longer sequence is refused, a shorter one takes the smallest that fits)."""
    if buckets is None:
        return None
    return list(buckets[: bisect.bisect_left(buckets, ceiling) + 1])  # increasing, none twice


def catalog_lines(doc: Doc) -> list[str]:
    if not doc["models"]:
        return [f"The catalog {doc['source']} has no models."]
    rows = [
        [
            m["name"],
            m["task"],
            m["transport"],
            m["lane"] or "-",
            str(m["workers"]),
            str(m["ceiling"])
            + (
                f" (catalog {m['catalog_ceiling']})" if m["ceiling"] != m["catalog_ceiling"] else ""
            ),
            ",".join(str(b) for b in m["buckets"]) if m["buckets"] else "-",
            "available" if m["available"] else f"unavailable: {m['problem']}",
        ]
        for m in doc["models"]
    ]
    header = ["model", "task", "transport", "lane", "workers", "ceiling", "buckets", "status"]
    notes = [
        f"  {m['name']}: {note}"
        for m in doc["models"]
        for note in (
            m["description"],
            m["note"],
            _scorer_note(m.get("scorer"), m["description"]),
            _instruction_note(m.get("instruction")),
            _prompts_note(m["prompts"]),
            _dims_note(m.get("matryoshka_dims")),
            _shipped_note(m.get("shipped_by"), doc["source"]),
        )
        if note
    ]
    return [
        f"Catalog {doc['source']}:",
        *table(header, rows),
        *(["Notes:", *notes] if notes else []),
    ]


def _model_note(entry: Entry) -> str:
    """The transport's own line about an available model (``Transport.model_note``)."""
    if entry.transport is None or not entry.available:
        return ""
    try:
        return entry.transport.transport.model_note(entry.spec)
    except Exception as exc:  # a plugin's bug must not hide the catalog
        return f"(transport {entry.spec.transport!r} failed to describe it: {exc!r})"


_SCORERS = {
    "cross-encoder": "cross-encoder: query and document scored together (sigmoid of the logit)",
    "bi-encoder": "bi-encoder: cosine of separate embeddings (not a cross-encoder)",
    "maxsim": (
        "MaxSim: each query token's best cosine over the document's ColBERT vectors, "
        "averaged over the query's tokens"
    ),
    "llm-reranker": (
        "LLM reranker: a language model judges each pair in its prompt "
        "(sigmoid of logit(yes) - logit(no))"
    ),
}


def _instruction_note(instruction: str | None) -> str:
    return f"instruction {instruction!r}" if instruction else ""


def _scorer_note(scorer: str | None, description: str) -> str:
    """What the model's scores are, unless its description says so already."""
    if not scorer or scorer in description:
        return ""
    return _SCORERS.get(scorer, "")


def _shipped_note(transport: str | None, source: str) -> str:
    if transport is None:
        return ""
    return f"not in {source}: shipped by the installed transport {transport!r}"


def _dims_note(dims: list[int] | None) -> str:
    sizes = ", ".join(map(str, dims or ()))
    return f"vectors may be cut to {sizes} dimensions (embed --dimensions N)" if sizes else ""


def _prompts_note(prompts: dict[str, str]) -> str:
    named = ", ".join(f"{name} = {text!r}" for name, text in prompts.items())
    return f"prompts {named}" if named else ""


# -- plugins ----------------------------------------------------------------------------
