"""The JSON-serialisable description of a tabletop scene: enough to rebuild it exactly, without physics.

Specs also arrive from clients of a Toolshed server, so a valid spec is one a worker can rebuild safely:
assets are catalogue names (never file paths), numbers are finite and bounded, and the object count is
capped.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spacetools.sim.camera import Camera

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]
Rgba = tuple[float, float, float, float]

ShapeKind = Literal["box", "cylinder", "sphere", "asset"]

#: Most objects a scene spec may hold (generated scenes hold at most `world.MAX_OBJECTS`); a spec of
#: thousands would hold a worker for minutes per call.
MAX_SCENE_OBJECTS = 32
#: Largest half extent (m) and `scale` an object may have: tabletop objects, not buildings.
MAX_HALF_EXTENT_M = 2.0
MAX_SCALE = 10.0


class ObjectSpec(BaseModel):
    """One object on the table, with its referring-expression metadata and its settled pose.

    `position`/`orientation` (xyzw) are the pose of the object's frame in the world. `half_extents` and
    `box_offset` describe its bounding box in that frame (the box centre is `box_offset`), from which the
    oriented 3D box follows: the tight box of what is rendered (mesh vertices, not collision shapes).
    Procedural shapes read their size from `half_extents`: a box uses all three,
    a cylinder has radius `half_extents[0]` and height `2 * half_extents[2]`, a sphere radius
    `half_extents[0]`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    index: int = Field(ge=0)
    name: str = Field(min_length=1, description='human name, e.g. "red mug" or "small blue box"')
    category: str = Field(min_length=1, description='e.g. "mug", "box"')
    color: str | None = Field(default=None, description='colour word used in the name, e.g. "red"')
    size_label: Literal["small", "large"] | None = None
    shape: ShapeKind
    asset: str | None = Field(
        default=None, description="a catalogue asset: a URDF path relative to pybullet_data"
    )
    scale: float = Field(default=1.0, gt=0, le=MAX_SCALE)
    rgba: Rgba | None = Field(default=None, description="colour override; None keeps the asset's own")
    position: Vec3
    orientation: Quat
    half_extents: Vec3
    box_offset: Vec3 = (0.0, 0.0, 0.0)

    @model_validator(mode="after")
    def _check_shape(self) -> ObjectSpec:
        if (self.shape == "asset") != (self.asset is not None):
            raise ValueError("an object has an `asset` exactly when its shape is 'asset'")
        if any(not 0 < h <= MAX_HALF_EXTENT_M for h in self.half_extents):
            raise ValueError(f"half_extents must be in (0, {MAX_HALF_EXTENT_M:g}] m, got {self.half_extents}")
        if self.asset is not None:
            # Imported here: the catalogue builds on this module's types.
            from spacetools.sim.catalogue import CATALOGUE_ASSETS

            if self.asset not in CATALOGUE_ASSETS:
                raise ValueError(f"asset {self.asset[:80]!r} is not in the object catalogue")
        return self


class SceneSpec(BaseModel):
    """A whole scene: seed, objects (indices 0..n-1 in order), camera and whether the robot is present.

    `robot_joints` poses the robot (its movable joints, arm then fingers; absent: the neutral pose), as
    in a picture the robot's camera took mid-episode.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    seed: int
    objects: list[ObjectSpec] = Field(max_length=MAX_SCENE_OBJECTS)
    camera: dict[str, Any]
    with_robot: bool = False
    # Left out of the JSON when absent, so specs without a posed robot keep their exact text.
    robot_joints: tuple[float, ...] | None = Field(default=None, exclude_if=lambda joints: joints is None)

    @model_validator(mode="after")
    def _check_objects(self) -> SceneSpec:
        indices = [obj.index for obj in self.objects]
        if indices != list(range(len(indices))):
            raise ValueError(f"object indices must be 0..n-1 in order, got {indices}")
        Camera.from_dict(self.camera)  # fails early with a clear message on a malformed camera
        if self.robot_joints is not None:
            from spacetools.sim.bodies import ROBOT_NEUTRAL_JOINTS  # the bodies build on this module

            if not self.with_robot or len(self.robot_joints) != len(ROBOT_NEUTRAL_JOINTS):
                raise ValueError(
                    f"robot_joints needs the robot and {len(ROBOT_NEUTRAL_JOINTS)} joint positions, got "
                    f"{len(self.robot_joints)} (with_robot={self.with_robot})"
                )
        return self

    def get_camera(self) -> Camera:
        """The scene's default camera."""
        return Camera.from_dict(self.camera)

    def object_named(self, name: str) -> list[ObjectSpec]:
        """All objects whose name is exactly `name` (more than one when deliberately ambiguous)."""
        return [obj for obj in self.objects if obj.name == name]
