"""Observation streams as JSON lines: one tagged event per line.

Reading is typed: every line must decode as one of
``synapse_core.observation.AnyEvent``, with no field missing and none unknown
(the events forbid unknown fields). An unknown event or a malformed line is
an error naming the line, never skipped: a certification cannot rest on a
stream it only partly understood.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

from synapse_core.events import AnyEvent, Event

from .errors import StreamError

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(AnyEvent)


def encode_line(event: Event) -> bytes:
    """One event as a JSON line (with its newline)."""
    return _encoder.encode(event) + b"\n"


def dumps(events: Iterable[Event]) -> bytes:
    return b"".join(encode_line(e) for e in events)


def loads(data: bytes | str, source: str = "<stream>") -> list[Event]:
    """Decode a whole stream; blank lines are allowed, nothing else is skipped."""
    return [event for _, event in loads_numbered(data, source)]


def loads_numbered(data: bytes | str, source: str = "<stream>") -> list[tuple[int, Event]]:
    """Decode a whole stream into ``(line number, event)`` pairs."""
    raw = data.encode() if isinstance(data, str) else data
    events: list[tuple[int, Event]] = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            events.append((number, _decoder.decode(line)))
        except msgspec.DecodeError as exc:
            raise StreamError(source, number, f"not a recorded event: {exc}") from None
    return events


def read(path: str | Path) -> list[Event]:
    """Read the stream recorded at ``path``."""
    return [event for _, event in read_numbered(path)]


def read_numbered(path: str | Path) -> list[tuple[int, Event]]:
    """Read the stream recorded at ``path`` as ``(line number, event)`` pairs."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StreamError(str(path), 0, f"cannot read file: {exc.strerror or exc}") from None
    return loads_numbered(data, source=str(path))
