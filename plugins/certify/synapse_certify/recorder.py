"""The recorder: a plugin object that keeps supervisor events.

It is *not* part of the entry-point module. The supervisor builds events only
when some plugin implements ``synapse_observe``, so an installed plugin that
always implemented it would make every host pay for events nobody reads.
Register a :class:`Recorder` only when recording is wanted::

    recorder = Recorder(path="stream.jsonl")
    config = attrs.evolve(config, certify_observation=True)
    async with open_host(config, plugins=[*others, recorder]) as host:
        ...
    recorder.close()

Register it before the host's first call: a lane's supervisor decides once,
when it is created, whether anyone is listening.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import IO, Self

from synapse_core import hookimpl
from synapse_core.events import Event

from .errors import RecordingError
from .stream import encode_line

_serial = itertools.count(1)


class Recorder:
    """Collects events in memory (``keep``) and/or appends them to ``path`` as JSON lines.

    Each line is flushed as it is written, so a host that dies mid-run leaves
    every event before the failure on disk.
    """

    def __init__(
        self, path: str | Path | None = None, *, keep: bool = True, append: bool = False
    ) -> None:
        # A distinct plugin name per recorder, so two may be registered at once.
        self.__name__ = f"synapse-certify-recorder-{next(_serial)}"
        self.keep = keep
        self.events: list[Event] = []
        self.path = Path(path) if path is not None else None
        self.written = 0
        self.error: OSError | None = None
        self._file: IO[bytes] | None = None
        if self.path is not None:
            try:
                self._file = self.path.open("ab" if append else "wb")
            except OSError as exc:
                raise RecordingError(f"cannot open {self.path}: {exc.strerror or exc}") from None

    @hookimpl
    def synapse_observe(self, event: Event) -> None:
        # Called on the serving path: must not raise. A write failure is kept
        # and reported by close(), because the stream is then incomplete.
        if self.keep:
            self.events.append(event)
        if self._file is None or self.error is not None:
            return
        try:
            self._file.write(encode_line(event))
            self._file.flush()
        except OSError as exc:
            self.error = exc
        else:
            self.written += 1

    def close(self) -> None:
        """Close the file; raise :class:`RecordingError` if any event was lost."""
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self.error = self.error or exc
        if self.error is not None:
            raise RecordingError(
                f"recording to {self.path} failed after {self.written} events: "
                f"{self.error.strerror or self.error}; the stream is incomplete"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
