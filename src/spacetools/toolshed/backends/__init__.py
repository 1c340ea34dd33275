"""Instance backends: in-process threads and worker processes behind one `Instance` interface.

A Ray backend (a later issue) adds `ray.py` with a `RayInstance` and registers it in `BACKENDS`
(and "ray" in `deployment.BackendName`); nothing else changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spacetools.tools.definition import Tool
from spacetools.toolshed.backends.base import Instance, InstanceCrashed
from spacetools.toolshed.backends.inprocess import InProcessInstance
from spacetools.toolshed.backends.process import ProcessInstance

__all__ = ["BACKENDS", "InProcessInstance", "Instance", "InstanceCrashed", "ProcessInstance"]

BACKENDS: dict[str, Callable[[type[Tool] | str, dict[str, Any], str], Instance]] = {
    "inprocess": InProcessInstance,
    "process": ProcessInstance,
}
