"""Names as errors and logs show them: quoted, and cut when too long.

A model name comes from a client, so it may be any length; echoing 10,000
characters of it back in an error body and a log line helps nobody.
"""

from __future__ import annotations

from collections.abc import Sequence

#: characters of a name shown before it is cut
SHOWN_CHARS = 200


def shown(name: str, limit: int = SHOWN_CHARS) -> str:
    """``repr(name)``, or for a name longer than ``limit`` characters its
    first ``limit`` quoted and followed by its length:
    ``'aaaa…' (10000 characters)``."""
    if len(name) <= limit:
        return repr(name)
    quoted = repr(name[:limit])
    return f"{quoted[:-1]}…{quoted[-1]} ({len(name)} characters)"


def listed(names: Sequence[str], limit: int) -> str:
    """The first ``limit`` of ``names``, comma-separated, then how many more
    there are; ``"none"`` for no names."""
    head = ", ".join(names[:limit]) or "none"
    more = len(names) - limit
    return f"{head} and {more} more" if more > 0 else head
