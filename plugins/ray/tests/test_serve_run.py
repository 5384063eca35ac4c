"""``serve run synapse_ray:app catalog=FILE`` as a user types it, on a machine
with no Ray running: the OpenAI client gets its answer, and Ctrl-C leaves no
process behind (Ray's or a Synapse worker).

Each command runs in a sandbox of its own (:mod:`synapse_ray.sandbox`:
loopback only, its own PID namespace and Ray temp directory), which ends
everything still in it however the test ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from synapse_ray import sandbox
from synapse_ray.sandbox import Sandbox
from synapse_ray.testing import mock_model, write_catalog

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(bool(sandbox.available()), reason=sandbox.available() or "available"),
]

#: the user's patience: an answer within three minutes of typing the command
ANSWER_S = 180.0
#: Ctrl-C: Serve shuts the application down, each host retires its workers,
#: then serve run stops the Ray instance it started. Serve's own part is
#: bounded at 30 s (``ServeControllerClient.shutdown``), Ray's stop is not;
#: on two busy cores the whole took over 90 s twice in fresh CI runs.
STOP_S = 180.0
#: how long Ray's processes may take to end once ``serve run`` has exited
EXIT_S = 30.0
#: what ``serve run`` says once the application serves
READY = "Application 'default' is ready"

#: an OpenAI client, as a user runs one beside ``serve run`` (no retries, bounded)
CLIENT = """
import json, openai
client = openai.OpenAI(
    base_url="http://127.0.0.1:8000/v1", api_key="unused", max_retries=0, timeout=60
)
answer = client.embeddings.create(
    model="m", input=["first text", "second text"], encoding_format="float"
)
print(json.dumps([len(item.embedding) for item in answer.data]))
"""


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Sandbox]:
    with Sandbox(tmp_path) as made:
        yield made


def test_plain_serve_run_answers_and_ctrl_c_leaves_nothing(box: Sandbox, tmp_path: Path) -> None:
    catalog = write_catalog(tmp_path, mock_model("m"))
    command = f".venv/bin/serve run synapse_ray:app catalog={catalog}"
    served = box.serve(command, tmp_path / "serve.log", READY, ANSWER_S)
    # One line says that the replica runs without a lane, and how to get more.
    (said,) = [line for line in served.output.splitlines() if "offers the 'synapse_lane'" in line]
    assert """ray start --head --resources='{"synapse_lane": N}'""" in said
    answer = box.run(f".venv/bin/python -c '{CLIENT}'", timeout=ANSWER_S)
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout) == [8, 8]  # two vectors of the catalog's 8 dims
    before = box.processes()
    assert len(before) > 3  # serve run, Ray's processes, the replica and its worker
    served.interrupt(STOP_S)
    # Serve shut the application down, its host retired the worker, and
    # serve run stopped the Ray instance it had started: its processes end
    # as serve run exits.
    box.drained(EXIT_S)


def test_too_many_replicas_without_lanes_fails_at_once_naming_the_command(
    box: Sandbox, tmp_path: Path
) -> None:
    catalog = write_catalog(tmp_path, mock_model("m"))
    command = f".venv/bin/serve run synapse_ray:app catalog={catalog} num_replicas=2"
    # Decided before Ray starts: no instance is running, and one started by
    # serve run would offer no lane.
    failed = box.run(command, timeout=60.0)
    assert failed.returncode != 0
    assert """ray start --head --resources='{"synapse_lane": 2}'""" in failed.stderr
    assert not box.processes(), box.describe(box.processes())
