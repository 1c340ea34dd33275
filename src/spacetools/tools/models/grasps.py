"""`grasp_generator` backed by a grasp server over HTTP (GraspGen has no package: serve it yourself).

The tool keeps the geometric tool's steps up to the search (mask selection, main cluster, support
plane, scene subsampling) and its result text; only the search goes to the server:

``POST {url}`` with ``{"object_points": [[x, y, z], …], "scene_points": [[x, y, z], …],
"up": [x, y, z], "max_width": m}`` (camera frame, metres) answers ``{"grasps": [{"pose": 4x4,
"width": m, "confidence": c}, …], "sampled": n, "collision_free": k}`` with collision-free grasps
(any order; ``collision_free``, optional, counts all that survived when only the best are sent).
An empty list is the "No collision-free grasps found" error, as from the original tool.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spacetools.kit.definition import ToolError
from spacetools.sim.gripper import GRIPPER_MAX_WIDTH
from spacetools.tools.grasp import Grasp, GraspGeneratorTool, GraspSearch
from spacetools.tools.pointcloud import SupportPlane, camera_up_fallback


class GraspServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    url: str = Field(description="The grasp server's endpoint, e.g. http://127.0.0.1:9000/grasps.")
    timeout_s: float = Field(60.0, gt=0)


class ServedGrasp(BaseModel):
    pose: list[list[float]] = Field(min_length=4, max_length=4)
    width: float = Field(gt=0)
    confidence: float = Field(ge=0, le=1)


class GraspServerReply(BaseModel):
    grasps: list[ServedGrasp]
    sampled: int = Field(ge=0)
    collision_free: int | None = Field(None, ge=0, description="When more survived than were sent.")


class GraspServerTool(GraspGeneratorTool):
    """`grasp_generator.compute_grasp` whose grasp search runs on a grasp server."""

    settings_model: ClassVar[type[BaseModel]] = GraspServerSettings
    # The model's settings only: the simulated parent's realism profile does not apply to a real model.
    config_keys: ClassVar[frozenset[str]] = frozenset(GraspServerSettings.model_fields)

    def __init__(self, **config: Any) -> None:
        super().__init__(**config)
        self.settings = GraspServerSettings.model_validate(config)

    def setup(self) -> None:
        import httpx

        self.client = httpx.Client(timeout=self.settings.timeout_s)

    def _search(
        self,
        object_points: np.ndarray,
        scene_points: np.ndarray,
        rng: np.random.Generator,
        plane: SupportPlane | None,
    ) -> GraspSearch:
        import httpx

        up = plane.normal if plane is not None else camera_up_fallback()
        request = {
            "object_points": object_points.tolist(),
            "scene_points": scene_points.tolist(),
            "up": [float(v) for v in up],
            "max_width": GRIPPER_MAX_WIDTH,
        }
        try:
            response = self.client.post(self.settings.url, json=request)
            response.raise_for_status()
            reply = GraspServerReply.model_validate(response.json())
        except httpx.HTTPError as error:
            raise ToolError(f"the grasp server failed: {type(error).__name__}: {error}") from None
        except (ValueError, ValidationError) as error:
            raise ToolError(f"the grasp server's reply is malformed: {str(error).splitlines()[0]}") from None
        if not reply.grasps:
            raise RuntimeError("No collision-free grasps found. All grasps collide with other objects.")
        grasps = [Grasp(np.asarray(g.pose, dtype=np.float64), g.width, g.confidence) for g in reply.grasps]
        if any(g.pose.shape != (4, 4) for g in grasps):
            raise ToolError("the grasp server's reply is malformed: every pose must be 4x4")
        best = max(grasps, key=lambda g: g.confidence)
        survivors = reply.collision_free if reply.collision_free is not None else len(grasps)
        return GraspSearch(best=best, sampled=reply.sampled, collision_free=survivors)
