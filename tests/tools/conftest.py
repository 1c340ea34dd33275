"""Shared fixtures: simulated scenes (rendered once per test session) and tool call contexts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from spacetools.kit.definition import ToolContext
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.layout import build_scene
from spacetools.sim.world import View

SCENE_SEEDS = (0, 1, 2)


@dataclass
class RenderedScene:
    """A built scene's spec JSON, its default view and ground truth."""

    seed: int
    spec_json: str
    view: View
    truths: list[ObjectTruth]

    def referable(self) -> list[ObjectTruth]:
        """Well-visible objects with a unique name."""
        names = [t.name for t in self.truths]
        return [
            t
            for t in self.truths
            if names.count(t.name) == 1 and t.visible_fraction >= 0.6 and t.mask.sum() >= 150
        ]


def render_scene(seed: int) -> RenderedScene:
    with build_scene(seed) as scene:
        view = scene.render()
        return RenderedScene(seed, scene.spec.model_dump_json(), view, scene.ground_truth(view))


@pytest.fixture(scope="session")
def scenes() -> list[RenderedScene]:
    return [render_scene(seed) for seed in SCENE_SEEDS]


@pytest.fixture(scope="session")
def scene(scenes: list[RenderedScene]) -> RenderedScene:
    return scenes[0]


MakeContext = Callable[..., ToolContext]


@pytest.fixture
def make_ctx() -> MakeContext:
    """A context for one call on a rendered scene (the image carries its scene spec)."""

    def make(rendered: RenderedScene, seed: int = 0) -> ToolContext:
        return scene_context(rendered, seed)

    return make


def scene_context(rendered: RenderedScene, seed: int = 0) -> ToolContext:
    """A context whose one image carries its scene in its attachment, as a Toolshed session sends it."""
    height, width = rendered.view.rgb.shape[:2]
    return ToolContext(
        "test",
        {0: rendered.view.rgb},
        [(height, width)],
        [{"scene": rendered.spec_json}],
        np.random.default_rng(seed),
    )
