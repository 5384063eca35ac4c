"""Which lanes the cluster offers, decided where the deployment is built, so
that ``serve run`` never waits silently for a node that will not come.

Each replica asks Ray for one unit of the lane resource (``synapse_lane``).
A Ray instance that ``serve run`` starts by itself offers none, and Ray would
then keep the replica pending forever, saying only, every half minute, that
no node type can fulfil the request. Instead:

- the cluster offers enough units: each replica takes one, as designed;
- it offers none and is one node (the plain ``serve run`` on a laptop): one
  replica runs there without the resource, after a one-line notice;
- otherwise the build fails at once, naming the ``ray start --resources``
  command that declares lanes (``wait_for_lanes=true`` waits for them
  instead: a cluster whose autoscaler adds lane nodes on demand).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TextIO

import attrs

from synapse_core import SynapseError


class LanesMissing(SynapseError):
    """The cluster cannot place the replicas asked for, and no lane node will
    join on its own: the message names the command that declares lanes."""


@attrs.frozen
class Cluster:
    """What the deployment's placement depends on."""

    #: alive nodes (1 for a Ray instance that ``serve run`` is about to start)
    nodes: int
    #: units of the lane resource that all nodes together offer
    lanes: float


def start_command(resource: str, units: int | str, *, head: bool) -> str:
    """The ``ray start`` command that declares ``units`` lanes on a node."""
    role = "--head" if head else "--address=HEAD:6379"
    return f"ray start {role} --resources='{{\"{resource}\": {units}}}'"


def placement(
    cluster: Cluster, resource: str, replicas: int | None, wait: bool = False
) -> dict[str, float]:
    """The custom resources each replica asks for: ``{resource: 1}``, or none
    on a single node that offers no lane. Raises :class:`LanesMissing` when
    the replicas could never all be placed (unless ``wait``)."""
    wanted = replicas or 1
    if wait or cluster.lanes >= wanted:
        return {resource: 1}
    single = cluster.nodes <= 1
    if cluster.lanes == 0 and single and wanted == 1:
        return {}
    if single:
        how = f"start Ray first with `{start_command(resource, wanted, head=True)}`"
    else:
        how = (
            f"start each node that hosts replicas with `{start_command(resource, 1, head=False)}`"
            " (one unit per device lane it offers)"
        )
    asked = "1 replica needs" if wanted == 1 else f"num_replicas={wanted} needs"
    offered = f"{cluster.lanes:g}" if cluster.lanes else "none"
    raise LanesMissing(
        f"{asked} {wanted} unit{'s' * (wanted > 1)} of the Ray resource {resource!r}, one per "
        f"device lane, and the cluster's {cluster.nodes} node{'s' * (cluster.nodes != 1)} "
        f"offer {offered}: {how}, then run `serve run` again; or pass wait_for_lanes=true "
        "if nodes with lanes will join by themselves (an autoscaling cluster)"
    )


def notice(resource: str, out: TextIO | None = None) -> None:
    """The one line that says a lone node serves without lanes, and how to get more."""
    print(
        f"synapse_ray: no Ray node offers the {resource!r} resource, so one replica serves "
        f"on this node without it; for N replicas, one per device lane, start Ray first "
        f"with `{start_command(resource, 'N', head=True)}`",
        file=out or sys.stderr,
        flush=True,
    )


def observed(resource: str) -> Cluster:
    """The cluster as it is now, from a connected driver (``ray.init`` done)."""
    import ray

    alive = [node for node in ray.nodes() if node.get("Alive")]  # type: ignore[no-untyped-call]
    offered = ray.cluster_resources().get(resource, 0)  # type: ignore[no-untyped-call]
    return Cluster(len(alive), float(offered))


def current(resource: str, address: str | None) -> Cluster:
    """The cluster the deployment will run on.

    Connected already (a config file deployed onto a cluster, or a program
    that called ``ray.init``): what Ray reports. Otherwise ``serve run`` is
    about to connect to ``address`` (its ``--address``, else ``RAY_ADDRESS``,
    else the cluster last started on this machine) or, when there is none, to
    start a Ray instance of its own, which offers no lane: then nothing needs
    asking. Else a short-lived driver asks the cluster and disconnects, so
    that ``serve run`` connects with its own options.
    """
    import ray

    if ray.is_initialized():
        return observed(resource)
    if _starts_local(address):
        return Cluster(nodes=1, lanes=0)
    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    try:
        return observed(resource)
    finally:
        ray.shutdown()


def _starts_local(address: str | None) -> bool:
    """Whether ``ray.init(address)`` would start a new local instance (Ray's own rule)."""
    if address == "local":
        return True
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # a Ray that moved it: ask the cluster instead
        return False
    return canonicalize_bootstrap_address(address) is None  # type: ignore[arg-type]


def serve_run_address() -> str | None:
    """The address ``serve run`` connects to: its ``--address`` option when
    the builder runs inside that command, else ``RAY_ADDRESS``."""
    import click

    context = click.get_current_context(silent=True)
    if context is not None and "address" in context.params:
        given = context.params["address"]
        return str(given) if given else None
    return os.environ.get("RAY_ADDRESS") or None
