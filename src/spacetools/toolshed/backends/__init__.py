"""Instance backends: in-process threads, worker processes and Ray actors behind one `Instance` interface."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spacetools.toolshed.backends.base import Instance, InstanceCrashed
from spacetools.toolshed.backends.inprocess import InProcessInstance
from spacetools.toolshed.backends.process import ProcessInstance
from spacetools.toolshed.backends.ray import RayInstance, fetch_cluster_values, ray_factory
from spacetools.toolshed.deployment import ToolDeployment

__all__ = [
    "InProcessInstance",
    "Instance",
    "InstanceCrashed",
    "ProcessInstance",
    "RayInstance",
    "instance_factory",
    "local_arguments",
]


def instance_factory(deployment: ToolDeployment, name: str) -> Callable[[], Instance]:
    """Makes the instances of one deployment (Ray instances also get its resources and placement, worker
    processes their BLAS threads)."""
    if deployment.backend == "ray":
        return ray_factory(deployment, name)
    if deployment.backend == "process":
        # As Ray does for its actors (OMP_NUM_THREADS): a worker's BLAS threads fit its CPU share, since
        # the pool's processes already spread over the cores.
        blas_threads = max(1, int(deployment.num_cpus))
        return lambda: ProcessInstance(deployment.tool, deployment.config, name, blas_threads=blas_threads)
    return lambda: InProcessInstance(deployment.tool, deployment.config, name)


def local_arguments(backend: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as the instances of `backend` take them: arrays a Ray actor left in the
    cluster's object store are fetched for the backends that cannot read the store themselves."""
    return kwargs if backend == "ray" else fetch_cluster_values(kwargs)
