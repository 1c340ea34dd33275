"""Pointing tools: `roborefer` (spatial referring) and `vlm` (a generic pointing VLM), simulated.

Both resolve the expression against the scene behind the image (`referring`) and answer with points
inside the target, as normalized (x, y). RoboRefer understands relations and free space ("the mug
left of the tray", "vacant space in front of the box") and placements ("free space left of the tray
where the mug can be placed": the centre of the best spot it finds, as the real model always answers
a point; whether the mug fits there is for the caller to measure); the generic VLM (Molmo in the
paper) only matches object words, ignoring relations. The realism profile adds jitter, misses on
ambiguous expressions, guesses on unknown names and failed calls.

The texts are the original's: RoboRefer prints the points rounded to 3 decimals and stores nothing;
the VLM prints unrounded floats and stores ``$<obj_name>_detections``.
"""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np

from spacetools.kit.definition import ToolContext, ToolResult, tool_method
from spacetools.sim.observation import Observation
from spacetools.sim.realism import Profile, maybe_fail, perturb_point
from spacetools.sim.referring import (
    best_partial_match,
    interior_point,
    parse_expression,
    resolve,
    spread_points,
)
from spacetools.tools.overlays import draw_points
from spacetools.tools.simworld import SimulatedTool

MAX_FREE_SPACE_POINTS = 5
"""`detect_all` on free space returns up to this many points spread over the region."""


def detection_variable(obj_name: str) -> str:
    """``<obj_name>_detections`` (for one or all instances) with spaces and other non-word characters as ``_``."""
    stem = re.sub(r"\W+", "_", obj_name.strip()).strip("_") or "object"
    return f"{stem}_detections"


def format_detections(points: np.ndarray, decimals: int | None) -> str:
    """``[(0.381, 0.428), …]``: Python float reprs, rounded to `decimals` (None: unrounded)."""
    rows = [tuple(float(c) if decimals is None else round(float(c), decimals) for c in p) for p in points]
    return str(rows)


def point_at(
    observation: Observation,
    obj_name: str,
    all_instances: bool,
    profile: Profile,
    rng: np.random.Generator,
    use_relations: bool = True,
) -> np.ndarray:
    """The normalized points ``(N, 2)`` a pointing model answers for ``obj_name`` (N may be 0)."""
    resolution = resolve(observation, parse_expression(obj_name), use_relations)
    if resolution.points is not None:
        points = resolution.points
    elif resolution.region is not None:
        if not resolution.region.any():
            return np.zeros((0, 2))
        points = spread_points(resolution.region, MAX_FREE_SPACE_POINTS if all_instances else 1)
    else:
        objects = list(resolution.objects)
        if not resolution.matched:
            guesses = best_partial_match(observation, parse_expression(obj_name).target)
            guessing = bool(guesses) and rng.random() < profile.unknown_guess_probability
            objects = [int(rng.choice(guesses))] if guessing else []
        elif not all_instances and len(objects) > 1 and rng.random() < profile.ambiguous_miss_probability:
            objects = [objects[int(rng.integers(1, len(objects)))]]
        if not all_instances:
            objects = objects[:1]
        points = np.asarray([interior_point(observation.truths[i].mask) for i in objects]).reshape(-1, 2)
    return np.asarray([perturb_point(p, profile, rng) for p in points]).reshape(-1, 2)


class PointingTool(SimulatedTool):
    """Shared behaviour of the pointing tools; subclasses set `name` and `understands_relations`."""

    understands_relations: ClassVar[bool] = True
    model: ClassVar[str] = "pointing model"
    stores_detections: ClassVar[bool] = False
    """Whether results are stored as ``$<obj_name>_detections`` (and the text says so)."""
    decimals: ClassVar[int | None] = 3
    """Rounding of the printed points (None: full float reprs)."""

    def _points(self, ctx: ToolContext, obj_name: str, image_index: int, all_instances: bool) -> np.ndarray:
        """The normalized points ``(N, 2)`` the model answers; the hook a real pointing model replaces."""
        observation = self.observe(ctx, image_index)
        maybe_fail(self.profile, ctx.rng, self.model)
        return point_at(
            observation, obj_name, all_instances, self.profile, ctx.rng, self.understands_relations
        )

    def _detect(self, obj_name: str, image_index: int, ctx: ToolContext, all_instances: bool) -> ToolResult:
        points = self._points(ctx, obj_name, image_index, all_instances)
        text = (
            f"Detected {len(points)} instance(s) of '{obj_name}': {format_detections(points, self.decimals)}"
        )
        value = {"points": [[float(x), float(y)] for x, y in points]}
        if not len(points):
            return ToolResult(text=text, value=value)
        result = ToolResult(text=text, value=value, images=[draw_points(ctx.image(image_index), points)])
        if self.stores_detections:
            variable = detection_variable(obj_name)
            result.text += f" Use ${variable} to reference them."
            result.variables[variable] = points
        return result

    @tool_method(geometry={"points": "points"})
    def detect_one(self, obj_name: str, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Point to one instance of an object (or place) described in words.

        Text output: one (x, y) point in normalized image coordinates [0, 1].

        Args:
            obj_name: Name or description of the object or place, e.g. "red mug" or "the mug left of the tray".
            image_index: Index of the image to look at (0 for the first image).
        """
        return self._detect(obj_name, image_index, ctx, all_instances=False)

    @tool_method(geometry={"points": "points"})
    def detect_all(self, obj_name: str, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Point to every instance of an object (or spots of a place) described in words.

        Text output: a list of (x, y) points in normalized image coordinates [0, 1].

        Args:
            obj_name: Name or description of the objects or place, e.g. "box" or "free space behind the mug".
            image_index: Index of the image to look at (0 for the first image).
        """
        return self._detect(obj_name, image_index, ctx, all_instances=True)


class RoboReferTool(PointingTool):
    """Spatial referring and pointing (RoboRefer in the paper), simulated."""

    name: ClassVar[str] = "roborefer"
    understands_relations: ClassVar[bool] = True
    model: ClassVar[str] = "RoboRefer"


class VLMPointingTool(PointingTool):
    """Generic VLM pointing (Molmo in the paper), simulated: it matches object words, not relations."""

    name: ClassVar[str] = "vlm"
    understands_relations: ClassVar[bool] = False
    model: ClassVar[str] = "VLM"
    stores_detections: ClassVar[bool] = True
    decimals: ClassVar[int | None] = None

    @tool_method(geometry={"points": "points"})
    def detect_one(self, obj_name: str, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Point to one instance of an object described in words.

        Text output: one (x, y) point in normalized image coordinates [0, 1]. Stored variables:
        $<obj_name>_detections (1x2 array; spaces in the name become underscores).

        Args:
            obj_name: Name or description of the object, e.g. "red mug".
            image_index: Index of the image to look at (0 for the first image).
        """
        return self._detect(obj_name, image_index, ctx, all_instances=False)

    @tool_method(geometry={"points": "points"})
    def detect_all(self, obj_name: str, image_index: int, *, ctx: ToolContext) -> ToolResult:
        """Point to every instance of an object described in words.

        Text output: a list of (x, y) points in normalized image coordinates [0, 1]. Stored variables:
        $<obj_name>_detections (Nx2 array; spaces in the name become underscores).

        Args:
            obj_name: Name or description of the objects, e.g. "box".
            image_index: Index of the image to look at (0 for the first image).
        """
        return self._detect(obj_name, image_index, ctx, all_instances=True)
