"""The recorder and the JSON-lines stream format."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from synapse_certify import Recorder, RecordingError, StreamError, read_stream
from synapse_certify.stream import dumps, loads
from synapse_core import PluginHost
from synapse_core.events import (
    AdmissionCount,
    Event,
    ShapeAdmitted,
    ShapeRefunded,
    WorkerExited,
    WorkerFaulted,
    WorkerInventory,
    WorkerStarted,
)
from synapse_core.plugin import Shape

EVERY_KIND: list[Event] = [
    WorkerStarted("mock:0", "m#1", 1, "m", None),
    ShapeAdmitted("mock:0", "m#1", 1, Shape(16, 2), 32, True),
    WorkerInventory("mock:0", "m#1", 1, [Shape(16, 2)]),
    WorkerInventory("mock:0", "m#1", 1, None, "timed out"),
    WorkerInventory("mock:0", "m#1", 1, []),
    AdmissionCount("mock:0", "m#1", 1, 1),
    WorkerFaulted("mock:0", "m#1", 1, "channel closed"),
    WorkerExited("mock:0", "m#1", 1, True),
    ShapeRefunded("mock:0", "m#1", 1, Shape(16, 2), 32),
]


def test_every_event_kind_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Recorder(path) as recorder:
        for event in EVERY_KIND:
            recorder.synapse_observe(event)
    assert recorder.events == EVERY_KIND
    assert len(path.read_bytes().splitlines()) == len(EVERY_KIND)
    assert read_stream(path) == EVERY_KIND


def test_recorders_are_called_through_the_hook() -> None:
    first, second = Recorder(), Recorder()
    host = PluginHost([first, second])
    observe = host.observer()
    assert observe is not None and host.problems == []
    observe(EVERY_KIND[0])
    assert first.events == second.events == [EVERY_KIND[0]]


def test_append_keeps_an_earlier_recording(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    with Recorder(path, keep=False) as recorder:
        recorder.synapse_observe(EVERY_KIND[0])
    assert recorder.events == []
    with Recorder(path, append=True) as recorder:
        recorder.synapse_observe(EVERY_KIND[1])
    assert read_stream(path) == EVERY_KIND[:2]
    with Recorder(path) as recorder:
        recorder.synapse_observe(EVERY_KIND[2])
    assert read_stream(path) == EVERY_KIND[2:3]


class _BrokenFile:
    def write(self, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_failed_write_does_not_raise_in_the_hook_but_on_close(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path / "s.jsonl")
    recorder.synapse_observe(EVERY_KIND[0])
    recorder._file = _BrokenFile()  # type: ignore[assignment]
    recorder.synapse_observe(EVERY_KIND[1])  # must not raise on the serving path
    assert recorder.events == EVERY_KIND[:2]
    with pytest.raises(RecordingError, match="after 1 events: No space left"):
        recorder.close()


def test_an_unopenable_file_is_a_recording_error(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="cannot open"):
        Recorder(tmp_path / "missing-dir" / "s.jsonl")


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        (b"{not json", "malformed"),
        (
            b'{"event": "worker_rebooted", "lane": "l", "worker_id": "w", "generation": 1}',
            "Invalid",
        ),
        (b'{"event": "admission_count", "lane": "l", "worker_id": "w", "generation": 1}', "count"),
        (
            b'{"event": "worker_inventory", "lane": "l", "worker_id": "w", "generation": 1, '
            b'"shapes": [[16]]}',
            "shapes",
        ),
    ],
)
def test_a_malformed_line_names_its_number(line: bytes, expect: str) -> None:
    good = dumps(EVERY_KIND[:2])
    with pytest.raises(StreamError) as caught:
        loads(good + b"\n" + line + b"\n", source="s.jsonl")
    error: Any = caught.value
    assert error.line == 4 and error.code == "bad-stream"  # blank line 3 is allowed
    assert str(error).startswith("s.jsonl line 4: not a recorded event")
    assert expect in str(error)


def test_an_unreadable_file_is_a_stream_error(tmp_path: Path) -> None:
    with pytest.raises(StreamError, match="cannot read file") as caught:
        read_stream(tmp_path / "absent.jsonl")
    assert caught.value.line == 0
