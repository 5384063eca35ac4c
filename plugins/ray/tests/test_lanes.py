"""Where the replicas go when the cluster offers few or no lanes: never a
silent wait for a node that will not come."""

from __future__ import annotations

import io

import pytest

from synapse_ray.lanes import Cluster, LanesMissing, notice, placement
from synapse_ray.settings import LANE_RESOURCE, settings_from_args

LANE = LANE_RESOURCE


@pytest.mark.parametrize(
    ("cluster", "replicas"),
    [(Cluster(1, 2), 2), (Cluster(1, 1), None), (Cluster(3, 4), 3)],
)
def test_enough_lanes_each_replica_takes_one(cluster: Cluster, replicas: int | None) -> None:
    assert placement(cluster, LANE, replicas) == {LANE: 1}


@pytest.mark.parametrize("replicas", [None, 1])
def test_a_lone_node_without_lanes_serves_one_replica_without_one(replicas: int | None) -> None:
    assert placement(Cluster(nodes=1, lanes=0), LANE, replicas) == {}


@pytest.mark.parametrize(
    ("cluster", "replicas", "command"),
    [
        # more replicas than a lone node can hold: start Ray with that many lanes
        (Cluster(1, 0), 2, """ray start --head --resources='{"synapse_lane": 2}'"""),
        (Cluster(1, 1), 3, """ray start --head --resources='{"synapse_lane": 3}'"""),
        # several nodes and none offers a lane: declare them as nodes join
        (
            Cluster(3, 0),
            None,
            """ray start --address=HEAD:6379 --resources='{"synapse_lane": 1}'""",
        ),
    ],
)
def test_otherwise_the_build_fails_naming_the_command_that_declares_lanes(
    cluster: Cluster, replicas: int | None, command: str
) -> None:
    with pytest.raises(LanesMissing) as caught:
        placement(cluster, LANE, replicas)
    message = str(caught.value)
    assert command in message
    assert "wait_for_lanes=true" in message


def test_wait_for_lanes_keeps_the_resource_for_nodes_yet_to_join() -> None:
    assert placement(Cluster(3, 0), LANE, 4, wait=True) == {LANE: 1}
    assert placement(Cluster(1, 0), LANE, None, wait=True) == {LANE: 1}


def test_the_notice_is_one_line_naming_the_command() -> None:
    out = io.StringIO()
    notice(LANE, out)
    text = out.getvalue()
    assert text.count("\n") == 1
    assert """ray start --head --resources='{"synapse_lane": N}'""" in text


@pytest.mark.parametrize(("given", "wanted"), [("true", True), ("0", False), (False, False)])
def test_wait_for_lanes_from_the_command_line(given: object, wanted: bool) -> None:
    assert settings_from_args({"wait_for_lanes": given}).wait_for_lanes is wanted
