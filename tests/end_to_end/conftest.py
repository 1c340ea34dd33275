"""Integration fixtures: a small SpatialSim set written by the real generator."""

from __future__ import annotations

from pathlib import Path

import pytest

from spacetools.bench.spatialsim.generator import export

# One pose and one RoboSpatial yes/no question, in templates the integration tests' endpoint reads.
SPATIALSIM_FAMILIES = ("boppose", "robospatial")
SPATIALSIM_SEED = 3


@pytest.fixture(scope="session")
def spatialsim_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of `spatialsim_<family>.parquet` files, one sample each."""
    folder = tmp_path_factory.mktemp("spatialsim")
    export(folder, n=1, seed=SPATIALSIM_SEED, families=list(SPATIALSIM_FAMILIES), workers=1)
    return folder
