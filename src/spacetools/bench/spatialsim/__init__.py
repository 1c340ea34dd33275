"""SpatialSim: benchmark questions with exact ground truth, generated from simulated tabletop scenes.

Families (data source `spatialsim_<family>`): robospatial, reflocation, refplacement, blinkdepth,
cvb2drelation, cvb3ddepth, boppose, bopgrasp, detect2d. Each sample's `extra_info["scene"]` holds its
scene spec JSON so that simulated tools can rebuild the scene.
"""

from spacetools.bench.spatialsim.generator import FAMILIES, Family, export, generate, generate_group

__all__ = ["FAMILIES", "Family", "export", "generate", "generate_group"]
