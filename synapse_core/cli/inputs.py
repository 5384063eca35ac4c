"""Inputs of ``synapse embed`` / ``synapse rerank``: arguments or a JSONL file.

A file holds one JSON object per line (``{"text": ...}`` for embed,
``{"document": ...}`` for rerank; other keys are ignored). Blank lines are
skipped; any other unusable line stops the command with its line number.

The file is read as bytes and each line decoded on its own: a text stream
decodes ahead in blocks, so invalid UTF-8 would surface lines early.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO, Literal

import attrs
import msgspec

from .report import InputError

Field = Literal["text", "document"]


class _Text(msgspec.Struct):
    text: str


class _Document(msgspec.Struct):
    document: str


_DECODERS: dict[Field, msgspec.json.Decoder[_Text] | msgspec.json.Decoder[_Document]] = {
    "text": msgspec.json.Decoder(_Text),
    "document": msgspec.json.Decoder(_Document),
}


@attrs.frozen
class Inputs:
    items: list[str]
    #: file name and line number of each item, when they came from a file
    source: str = ""
    lines: list[int] = attrs.field(factory=list)

    def where(self, index: int) -> str:
        """Where input ``index`` came from, for messages ("" for arguments)."""
        if not self.source or not 0 <= index < len(self.lines):
            return ""
        return f"{self.source} line {self.lines[index]}"


def from_arguments(items: Sequence[str]) -> Inputs:
    return Inputs(list(items))


def read_jsonl(stream: BinaryIO, source: str, field: Field) -> Inputs:
    """Read ``{"<field>": "..."}`` lines; raise :class:`InputError` naming a bad line."""
    decoder = _DECODERS[field]
    items: list[str] = []
    lines: list[int] = []
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{source} line {number}: not UTF-8 text ({exc.reason} at byte {exc.start + 1} "
                "of the line)"
            ) from None
        if not text.strip():
            continue
        try:
            record = decoder.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise InputError(
                f'{source} line {number}: expected a JSON object with a "{field}" string ({exc})'
            ) from None
        items.append(record.text if isinstance(record, _Text) else record.document)
        lines.append(number)
    return Inputs(items, source, lines)
