"""The printed table and the results file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .harness import Figure, Mode

RESULTS = Path(__file__).parent / "results"
#: the last full run of every group: committed, the figures the docs cite
LATEST = RESULTS / "latest.json"
#: any other run (quick, smoke, some groups only, a shortcut switched off): not committed
PARTIAL = RESULTS / "partial.json"


def met(figure: Figure, figures: Sequence[Figure]) -> bool | None:
    """Whether ``figure``'s median meets its target (``None``: no target)."""
    target = figure.target
    if target is None:
        return None
    reference = None
    if target.against:
        reference = next(f.median for f in figures if f.key == target.against)
    return target.met(figure.median, reference)


def _number(value: float) -> float:
    return round(value, 4) if abs(value) < 1e6 else value


def results(
    figures: Sequence[Figure], mode: Mode, machine: dict[str, Any], created: str, duration_s: float
) -> dict[str, Any]:
    """The results document: every figure's median as a top-level number, then
    each figure in full (median, min, max, repetitions, target, parts)."""
    doc: dict[str, Any] = {f.key: _number(f.median) for f in figures}
    doc["schema"] = 1
    doc["mode"] = mode.name
    doc["created"] = created
    doc["duration_s"] = round(duration_s, 2)
    doc["machine"] = machine
    doc["figures"] = {
        f.key: {
            "median": _number(f.median),
            "min": _number(f.min),
            "max": _number(f.max),
            "repetitions": len(f.values),
            "values": [_number(v) for v in f.values],
            "unit": f.unit,
            "what": f.what,
            "target": (
                None
                if f.target is None
                else {
                    "op": f.target.op,
                    "value": f.target.value,
                    "against": f.target.against or None,
                }
            ),
            "met": met(f, figures),
            "parts": {k: _number(v) for k, v in f.detail.items()},
        }
        for f in figures
    }
    return doc


def write(doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _fmt(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 10_000:
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{value:.3g}"


def table(figures: Sequence[Figure]) -> str:
    rows = [("figure", "median", "min", "max", "reps", "unit", "target", "ok")]
    for f in figures:
        ok = met(f, figures)
        rows.append(
            (
                f.key,
                _fmt(f.median),
                _fmt(f.min),
                _fmt(f.max),
                str(len(f.values)),
                f.unit,
                f.target.describe() if f.target else "report",
                "" if ok is None else ("yes" if ok else "MISSED"),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.ljust(w) if i in (0, 5, 6, 7) else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown(figures: Sequence[Figure]) -> str:
    """The same table as Markdown, for docs/performance.md."""
    lines = [
        "| figure | median | min | max | reps | target | met |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for f in figures:
        ok = met(f, figures)
        target = f.target.describe() if f.target else "report"
        mark = "" if ok is None else ("yes" if ok else "**missed**")
        lines.append(
            f"| `{f.key}` | {_fmt(f.median)} | {_fmt(f.min)} | {_fmt(f.max)} | {len(f.values)} "
            f"| {target} {f.unit if f.unit != 'ratio' else ''} | {mark} |".replace("  |", " |")
        )
    return "\n".join(lines)
