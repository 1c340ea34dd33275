"""Named tool sets: which tools a Toolshed serves and how (`TOOLSETS["v1"]` is the paper's V1 set)."""

from __future__ import annotations

from collections.abc import Sequence

from spacetools.toolshed.deployment import BackendName, ToolDeployment

# Simulated perception rebuilds and renders scenes (~0.5 s, pybullet holds the GIL), so it runs in
# worker processes; geometry (boxes, grasps) is CPU-heavy numpy and runs in processes too, while the
# cheap array operations of vision_ops stay in the server process. On Ray (`on_backend(V1, "ray")`)
# each simulated instance reserves a fifth of a CPU: they idle between calls, and the whole set then
# fits a 2-core node; a deployment of real models would reserve `num_gpus` instead.
_SHARE = 0.2
V1: list[ToolDeployment] = [
    ToolDeployment(
        tool="spacetools.tools.pointing:RoboReferTool", instances=2, backend="process", num_cpus=_SHARE
    ),
    ToolDeployment(
        tool="spacetools.tools.pointing:VLMPointingTool", instances=1, backend="process", num_cpus=_SHARE
    ),
    ToolDeployment(
        tool="spacetools.tools.segmentation:Sam2Tool", instances=2, backend="process", num_cpus=_SHARE
    ),
    ToolDeployment(
        tool="spacetools.tools.depth:DepthEstimatorTool", instances=2, backend="process", num_cpus=_SHARE
    ),
    ToolDeployment(
        tool="spacetools.tools.bbox:BoundingBoxTool", instances=1, backend="process", num_cpus=_SHARE
    ),
    ToolDeployment(
        tool="spacetools.tools.grasp:GraspGeneratorTool", instances=1, backend="process", num_cpus=_SHARE
    ),
    ToolDeployment(
        tool="spacetools.tools.vision_ops:VisionOpsTool", instances=1, backend="inprocess", num_cpus=_SHARE
    ),
]

# V2 adds the robot. One instance: each session's simulated world lives in that instance (a robot is
# state), so every call of a session must reach it; motions take seconds of simulated time.
ROBOT = ToolDeployment(tool="spacetools.tools.robot:RobotTool", instances=1, backend="process", timeout_s=300)
V2: list[ToolDeployment] = [*V1, ROBOT]

# Stage 1 of DIRL trains the IRL teacher with one pointing tool only (the paper's RoboRefer teacher).
POINTING: list[ToolDeployment] = [V1[0]]
TOOLSETS: dict[str, list[ToolDeployment]] = {"v1": V1, "v2": V2, "pointing": POINTING}
TOOLSET_NAMES: tuple[str, ...] = tuple(TOOLSETS)


def with_profile(deployments: str | Sequence[ToolDeployment], profile: str) -> list[ToolDeployment]:
    """The deployments (or a named tool set's) with their simulated tools set to a realism `profile`.

    Realism is a deployment setting (``config["profile"]``); tools without it are left as they are.
    A `ValueError` names an unknown tool set or profile (the simulated tools own the profiles).
    """
    if isinstance(deployments, str):
        deployments = get_toolset(deployments)
    return [deployment.with_setting("profile", profile) for deployment in deployments]


def get_toolset(name: str) -> list[ToolDeployment]:
    """The deployments of a named tool set; a ``ValueError`` listing the choices otherwise."""
    try:
        return TOOLSETS[name]
    except KeyError:
        raise ValueError(f"unknown toolset {name!r}; choose one of: {', '.join(TOOLSET_NAMES)}") from None


def on_backend(deployments: list[ToolDeployment], backend: BackendName) -> list[ToolDeployment]:
    """The deployments with every tool that runs outside the server process moved to `backend`.

    In-process tools (cheap array operations) stay in the server: a round trip would cost more than them.
    """
    return [
        deployment
        if deployment.backend == "inprocess"
        else deployment.model_copy(update={"backend": backend})
        for deployment in deployments
    ]
