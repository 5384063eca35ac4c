"""``serve run synapse_ray:app catalog=catalog.toml``: the application builder.

Ray Serve calls :func:`app` with the command line's ``key=value`` arguments
(or a config file's ``args:``) and deploys what it returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from ray.serve import Application, Deployment

from .deployment import SynapseHosts, http_app
from .lanes import current, notice, placement, serve_run_address
from .settings import graceful_shutdown_s, read_catalog, settings_from_args


def app(args: Mapping[str, Any] | None = None) -> Application:
    """Build the deployment: ``num_replicas`` hosts, each taking one unit of
    the ``lane_resource`` custom resource, so no two share a device lane.

    The catalog is read and checked here, where ``serve run`` runs: a bad one
    fails at once with the path of each bad field, and its text travels to
    the replicas, which need not see the file. So is the cluster: with no
    node offering lanes, a lone node serves one replica without one (after a
    notice) and anything else fails at once (:mod:`synapse_ray.lanes`).
    """
    settings = settings_from_args(args or {})
    catalog, config = read_catalog(settings)
    http_app()  # fails here, not in every replica, when synapse-http is missing
    resource = settings.lane_resource
    cluster = current(resource, serve_run_address())
    resources = placement(cluster, resource, settings.num_replicas, settings.wait_for_lanes)
    if not resources:
        notice(resource)
    # serve.deployment made the class a Deployment; its stubs do not say so.
    deployment = cast(Deployment, SynapseHosts).options(
        graceful_shutdown_timeout_s=graceful_shutdown_s(settings, config),
        ray_actor_options={
            # The replica only relays; its workers are processes of their own.
            "num_cpus": 0,
            "resources": resources,
        },
    )
    if settings.num_replicas is not None:
        # Left out otherwise: a config file's autoscaling_config then decides.
        deployment = deployment.options(num_replicas=settings.num_replicas)
    built: Application = deployment.bind(catalog, settings.max_models_per_replica, settings.http())
    return built
