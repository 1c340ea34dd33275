"""What every question family sees of a scene: an `Observation` and which of its objects to ask about."""

from __future__ import annotations

from functools import cached_property

from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.observation import Observation

#: An object is asked about only if this much of it is visible and its mask has this many pixels.
MIN_VISIBLE_FRACTION = 0.6
MIN_MASK_PIXELS = 150


class SceneContext(Observation):
    """A rendered scene (with its table geometry) and the objects a question may name."""

    @cached_property
    def visible(self) -> list[ObjectTruth]:
        """Objects seen well enough to ask about, in index order."""
        return [
            t
            for t in self.truths
            if t.visible_fraction >= MIN_VISIBLE_FRACTION and int(t.mask.sum()) >= MIN_MASK_PIXELS
        ]

    def referable(self) -> list[ObjectTruth]:
        """Visible objects whose name is unique in the scene, so the name alone refers to them."""
        counts: dict[str, int] = {}
        for truth in self.truths:
            counts[truth.name] = counts.get(truth.name, 0) + 1
        return [t for t in self.visible if counts[t.name] == 1]
