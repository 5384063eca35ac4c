"""``--log-format json``: every line ``synapse serve`` writes on stderr is one
JSON object, worker faults and restarts included with their facts."""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest

from synapse_http.logs import JsonFormatter, TextFormatter
from synapse_http.testing import Server, model

pytestmark = pytest.mark.subprocess


def parsed(lines: list[str]) -> list[dict[str, Any]]:
    docs = []
    for number, line in enumerate(lines, 1):
        doc = json.loads(line)  # raises on a line that is not JSON
        assert isinstance(doc, dict), (number, line)
        assert {"time", "level", "logger", "message"} <= doc.keys(), (number, line)
        docs.append(doc)
    return docs


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_every_line_parses_and_worker_faults_carry_their_facts(
    serve: Callable[..., Server], backend: str
) -> None:
    crash = model("crash-infer", faults={"crash_on_infer": 1, "only_generation": 1})
    server = serve(backend, [crash], "--log-format", "json")
    with server.client() as http:
        assert http.post("/embed", json={"inputs": ["a"]}).status_code == 503
        assert http.post("/embed", json={"inputs": ["a"]}).status_code == 200
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    lines = server.output().splitlines()
    docs = parsed(lines)
    by_message = {d["message"].split(" ", 1)[0]: d for d in docs}
    assert by_message["serving"]["url"] == server.url
    assert by_message["models:"]["models"] == ["crash-infer"]
    events = {d["event"]: d for d in docs if "event" in d}
    fault, restart = events["fault"], events["restart"]
    assert (fault["model"], fault["generation"], fault["level"]) == ("crash-infer", 1, "warning")
    assert fault["logger"] == "synapse.workers" and fault["worker"]
    assert (restart["model"], restart["generation"]) == ("crash-infer", 2)
    assert any(d["message"].startswith("SIGTERM: stopping") for d in docs)
    assert "exit" in events  # every worker's exit, confirmed


def record(message: str, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord("synapse.x", logging.ERROR, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    return made


def test_a_record_is_one_line_with_its_facts_and_never_loses_the_base_keys() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        failing = record("two\nlines", exc_info=sys.exc_info())
    failing.synapse = {"request_id": "r1", "status": 500, "message": "not this", "level": "no"}
    line = JsonFormatter().format(failing)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["message"] == "two\nlines" and doc["level"] == "error"
    assert doc["request_id"] == "r1" and doc["status"] == 500
    assert "ValueError: bad" in doc["exception"]
    assert doc["time"].endswith("Z") and doc["logger"] == "synapse.x"


def test_text_lines_are_as_before() -> None:
    plain = record("worker fault: ...")
    assert TextFormatter().format(plain) == "synapse: worker fault: ..."
    own = logging.LogRecord("synapse.serve", logging.WARNING, __file__, 1, "serving on", (), None)
    assert TextFormatter().format(own) == "synapse: warning: serving on"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_access_log_gives_each_request_its_id_model_status_and_time(
    serve: Callable[..., Server], backend: str
) -> None:
    """``--access-log``: one record a request, on the direct routes and on
    those Starlette serves, the client's X-Request-Id kept; off, none."""
    server = serve(backend, [model("e")], "--log-format", "json", "--access-log")
    with server.client() as http:
        given = {"X-Request-Id": "req-42"}
        assert http.post("/embed", json={"inputs": ["a"]}, headers=given).status_code == 200
        assert http.post("/embed", json={"inputs": [""]}).status_code == 422
        assert http.get("/v1/models").status_code == 200
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    access = [d for d in parsed(server.output().splitlines()) if d["logger"] == "synapse.access"]
    assert [(d["method"], d["route"], d["status"]) for d in access] == [
        ("POST", "/embed", 200),
        ("POST", "/embed", 422),
        ("GET", "/v1/models", 200),
    ]
    assert access[0]["request_id"] == "req-42" and access[0]["model"] == "e"
    assert access[1]["request_id"] and access[1]["request_id"] != "req-42"
    assert all(d["duration_ms"] >= 0 for d in access)
    quiet = serve(backend, [model("e")], "--log-format", "json")
    with quiet.client() as http:
        assert http.post("/embed", json={"inputs": ["a"]}).status_code == 200
    quiet.signal(signal.SIGTERM)
    assert quiet.wait() == 0
    assert not [d for d in parsed(quiet.output().splitlines()) if d["logger"] == "synapse.access"]
