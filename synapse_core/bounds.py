"""Bounds on the work a call costs before it runs.

A text far longer than a model's ceiling is refused without being tokenised
(a tokenizer's time grows with the text, and a 2 MB text takes seconds), or,
when truncation was asked for, cut to that bound first. The bound is in
characters, like TEI's max input length times a factor:
``ceiling * CHARS_PER_TOKEN``. Text averages 4 to 6 characters per token
(code and URLs fewer), so a text past 32 characters a token could not fit
the ceiling as any tokenizer the host serves reads it; only a text of runs
of spaces, or of words longer than a tokenizer's own word limit, could, and
those are refused too.

A call whose texts are large together is planned in a worker thread
(:func:`plan_large`), so the event loop goes on serving: every input is
sized and checked there, each by its own call of the tokenizer (or a batch
at a time, by one that releases the GIL), so the loop runs between them
even when a tokenizer holds the GIL while it works. Planning in the thread
does what it does on the loop (:func:`~synapse_core.plan.plan_call`): a
tokenizer that counts cheaply only counts, and the call's ids are encoded
chunk by chunk while its earlier requests run; any other encodes each text
once, there, and the plan keeps the ids.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Sequence

import anyio

from .catalog import Entry
from .cut import fits_budget
from .errors import Refused
from .kinds import Kind
from .naming import shown

# Plan and Truncate are the host's too: it reads them from here.
from .plan import Plan as Plan
from .plan import Truncate as Truncate
from .plan import plan_call

#: characters a text may have per token of the model's ceiling
CHARS_PER_TOKEN = 32
#: calls with more characters than this in all are tokenised off the event loop
OFFLOAD_CHARS = 16 * 1024
#: worker threads tokenising a host's large calls at once
TOKENIZING_THREADS = 2

Texts = Sequence[str | Sequence[int]]


def max_chars(entry: Entry) -> int:
    """The longest text (in characters) ``entry``'s model is given to tokenise."""
    return entry.ceiling * CHARS_PER_TOKEN


def characters(texts: object, query: str | None = None) -> int:
    """The characters of the texts (and query) of a call: what tokenising it costs."""
    total = len(query) if isinstance(query, str) else 0
    if isinstance(texts, str):
        return total + len(texts)
    if type(texts) is list or type(texts) is tuple:
        for text in texts:
            if type(text) is str:
                total += len(text)
    return total


def bounded(
    entry: Entry, texts: Texts, query: str | None, cut: str | bool
) -> tuple[Texts, tuple[int, ...]]:
    """``texts`` with every text over :func:`max_chars` refused (``over-ceiling``,
    naming it), or with ``cut`` (``"start"``, or true for the end) cut to it at
    that end; and the indexes cut. A query over it is refused: it is never cut.
    Texts that are not a list, a tuple or one string are left to the plan."""
    limit = max_chars(entry)
    if isinstance(query, str) and len(query) > limit:
        raise _too_long(entry, "the query", len(query), limit, None)
    if isinstance(texts, str):
        texts = [texts]
    elif type(texts) is not list and type(texts) is not tuple:
        return texts, ()
    over = [i for i, text in enumerate(texts) if type(text) is str and len(text) > limit]
    if not over:
        return texts, ()
    if not cut:
        index = over[0]
        what = "document" if query is not None else "input"
        raise _too_long(entry, f"{what} {index}", len(texts[index]), limit, index)
    kept = list(texts)
    for index in over:
        text = kept[index]
        assert isinstance(text, str)
        kept[index] = text[-limit:] if cut == "start" else text[:limit]
    return kept, tuple(over)


def planned(entry: Entry, texts: Texts, query: str | None, truncate: Truncate) -> Plan:
    """The plan of a call, its texts :func:`bounded` first."""
    bound, cut = bounded(entry, texts, query, truncate)
    return _with_cut(plan_call(entry, bound, query, truncate), cut)


async def plan_large(
    entry: Entry,
    texts: Texts,
    query: str | None,
    truncate: Truncate,
    limiter: anyio.CapacityLimiter,
) -> Plan:
    """The plan of a call whose texts are large together (over
    :data:`OFFLOAD_CHARS`; the route that starts calls, :mod:`.starting`,
    asks): bounded on the event loop, then planned in a worker thread, at
    most ``limiter``'s threads at once (:data:`TOKENIZING_THREADS` per host)."""
    bound, cut = bounded(entry, texts, query, truncate)

    def plan() -> Plan | Exception:
        try:
            return _with_cut(plan_call(entry, bound, query, truncate), cut)
        except Exception as exc:
            # Refused: let go of every id encoded (the traceback's frames
            # hold them) before the memory is given back.
            refusal = exc.with_traceback(None)
        give_back()
        # Returned, not raised: an exception raised across the thread is
        # kept in a cycle with the frames it passes (asyncio's future holds
        # it, its traceback holds the future's frame), and with it the
        # call's texts, until the cyclic collector happens to run, long
        # after the memory was given back.
        return refusal

    outcome = await anyio.to_thread.run_sync(plan, limiter=limiter)
    if isinstance(outcome, Exception):
        try:
            raise outcome
        finally:
            del outcome  # its traceback holds this frame: no cycle with it
    return outcome


def planned_for(
    entry: Entry,
    texts: Texts,
    query: str | None,
    truncate: Truncate,
    plan: Plan | None,
    outputs: tuple[Kind, ...],
) -> Plan:
    """``plan`` (made off the loop), else the call's plan (:func:`planned`),
    asking for ``outputs`` (refused first if the model lacks one; a plain
    embed call asks for dense vectors, which a SPLADE model does not make)."""
    if outputs:
        refuse_outputs(entry, outputs)
    elif entry.spec.task == "embed":
        refuse_outputs(entry, (Kind.DENSE,))
    plan = plan or planned(entry, texts, query, truncate)
    if outputs:
        plan.outputs = outputs
    return plan


def small(entry: Entry, plan: Plan) -> bool:
    """Whether ``plan`` is one request's worth (``cut.is_small``)."""
    assert entry.transport is not None  # the catalog refused the call otherwise
    return fits_budget(plan, entry.spec, entry.transport.transport)


def refuse_outputs(entry: Entry, outputs: tuple[Kind, ...]) -> None:
    """Refuse a call for ``outputs`` the model's files say it does not
    compute (``ModelTraits.outputs``), before any worker starts."""
    known = entry.traits.outputs
    if known is None:
        return
    missing = [kind.value for kind in outputs if kind not in known]
    if missing:
        model = entry.spec.name
        offered = ", ".join(sorted(kind.value for kind in known)) or "none"
        raise Refused(
            "unsupported-output",
            f"model {shown(model)} does not compute {' or '.join(missing)} outputs (it "
            f"computes: {offered}); ask another model for them",
            model=model,
        )


def _with_cut(plan: Plan, cut: tuple[int, ...]) -> Plan:
    """``plan``, also listing as truncated the texts ``cut`` before it was made."""
    if cut:
        plan.truncated = tuple(sorted({*plan.truncated, *cut}))
    return plan


def give_back() -> None:
    """Return the memory freed by a large piece of work to the system, where
    the C library can (glibc keeps what a worker thread freed in that
    thread's own arena otherwise, and the process stays at its peak)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


#: blocks at least this large are mapped on their own (see :func:`map_large_blocks`)
MAP_BLOCK_BYTES = 256 * 1024
#: glibc's mallopt parameter for it
_M_MMAP_THRESHOLD = -3


def map_large_blocks() -> None:
    """Have the C library map every block of :data:`MAP_BLOCK_BYTES` or more on
    its own, so that freeing one (a large body, a large answer) returns it to
    the system at once. For a server process: glibc otherwise raises that
    threshold to the size of the first large block freed, and later ones
    come from its heap, which stays at the process's peak."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, MAP_BLOCK_BYTES)


def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim, libc.mallopt  # noqa: B018 (glibc's; musl has neither)
    except (OSError, AttributeError):
        return None
    return libc


_malloc_trim: Callable[[int], int] | None = getattr(_libc(), "malloc_trim", None)


def _too_long(entry: Entry, what: str, length: int, limit: int, index: int | None) -> Refused:
    model = entry.spec.name
    return Refused(
        "over-ceiling",
        f"{what} has {length} characters, more than model {shown(model)} could take in its "
        f"ceiling of {entry.ceiling} tokens (texts over {limit} characters, "
        f"{CHARS_PER_TOKEN} a token, are refused unread); split it into shorter texts"
        + ("" if index is None else ", or ask for truncation explicitly"),
        model=model,
        index=index,
    )
