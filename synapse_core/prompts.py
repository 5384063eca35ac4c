"""Prompts: a text put in front of each input by name, as sentence-transformers does.

A model's prompts are its catalog entry's ``prompts`` and those its files
carry (``Transport.traits``; the entry's win). A text without tokens gets
none, so it is still refused as empty; token ids cannot take a prompt's text.
"""

from __future__ import annotations

from collections.abc import Sequence

from .catalog import Entry
from .errors import Refused
from .naming import shown


def prompted(entry: Entry, name: str, texts: Sequence[str | Sequence[int]]) -> list[str]:
    """``texts`` with the model's prompt ``name`` in front of each; a
    :class:`Refused` (``unknown-prompt``, or ``invalid-text`` for token ids)."""
    model = entry.spec.name
    prompt = entry.spec.prompts.get(name)
    if prompt is None:
        known = ", ".join(map(repr, sorted(entry.spec.prompts))) or "none"
        raise Refused(
            "unknown-prompt",
            f"model {shown(model)} has no prompt {shown(name)}; its prompts: {known}",
            model=model,
        )
    tokenizer = entry.tokenizer
    count = getattr(tokenizer, "count", None) or (lambda text: len(tokenizer.encode(text)))
    out: list[str] = []
    for index, given in enumerate(texts):
        if not isinstance(given, str):
            raise Refused(
                "invalid-text",
                f"input {index} is token ids, which prompt {shown(name)} cannot be put in front "
                "of; give the text, or the prompt's ids with the input's and no prompt",
                model=model,
                index=index,
            )
        out.append(prompt + given if count(given) else given)
    return out
