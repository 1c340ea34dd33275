"""Named tool sets: which tools a Toolshed serves and how (`TOOLSETS["v1"]` is the paper's V1 set)."""

from __future__ import annotations

from spacetools.toolshed.deployment import ToolDeployment

# Simulated perception rebuilds and renders scenes (~0.5 s, pybullet holds the GIL), so it runs in
# worker processes; geometry (boxes, grasps) is CPU-heavy numpy and runs in processes too, while the
# cheap array operations of vision_ops stay in the server process.
V1: list[ToolDeployment] = [
    ToolDeployment(tool="spacetools.tools.pointing:RoboReferTool", instances=2, backend="process"),
    ToolDeployment(tool="spacetools.tools.pointing:VLMPointingTool", instances=1, backend="process"),
    ToolDeployment(tool="spacetools.tools.segmentation:Sam2Tool", instances=2, backend="process"),
    ToolDeployment(tool="spacetools.tools.depth:DepthEstimatorTool", instances=2, backend="process"),
    ToolDeployment(tool="spacetools.tools.bbox:BoundingBoxTool", instances=1, backend="process"),
    ToolDeployment(tool="spacetools.tools.grasp:GraspGeneratorTool", instances=1, backend="process"),
    ToolDeployment(tool="spacetools.tools.vision_ops:VisionOpsTool", instances=1, backend="inprocess"),
]

# V2 adds the robot. One instance: each session's simulated world lives in that instance (a robot is
# state), so every call of a session must reach it; motions take seconds of simulated time.
ROBOT = ToolDeployment(tool="spacetools.tools.robot:RobotTool", instances=1, backend="process", timeout_s=300)
V2: list[ToolDeployment] = [*V1, ROBOT]

TOOLSETS: dict[str, list[ToolDeployment]] = {"v1": V1, "v2": V2}
TOOLSET_NAMES: tuple[str, ...] = tuple(TOOLSETS)


def get_toolset(name: str) -> list[ToolDeployment]:
    """The deployments of a named tool set; a ``ValueError`` listing the choices otherwise."""
    try:
        return TOOLSETS[name]
    except KeyError:
        raise ValueError(f"unknown toolset {name!r}; choose one of: {', '.join(TOOLSET_NAMES)}") from None
