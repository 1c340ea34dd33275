"""One local Ray for the whole test session (it takes seconds to start), started only when a test needs it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def local_ray() -> Iterator[None]:
    """A local Ray on 127.0.0.1 with 2 logical CPUs, no dashboard, no auth (tests only)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
