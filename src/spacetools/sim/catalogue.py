"""The object catalogue: procedural primitives and pybullet_data assets, with names, colours and sizes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spacetools.sim.scene import Rgba, ShapeKind, Vec3

PALETTE: dict[str, Rgba] = {
    "red": (0.85, 0.12, 0.10, 1.0),
    "green": (0.16, 0.62, 0.22, 1.0),
    "blue": (0.12, 0.30, 0.85, 1.0),
    "yellow": (0.95, 0.83, 0.15, 1.0),
    "orange": (0.96, 0.50, 0.10, 1.0),
    "purple": (0.52, 0.22, 0.70, 1.0),
    "white": (0.93, 0.93, 0.93, 1.0),
    "black": (0.08, 0.08, 0.08, 1.0),
}
"""Colour words and the RGBA they render with; distinct enough for a detector to tell apart."""

ALL_COLORS = tuple(PALETTE)

RANDOM_OBJECT_ASSETS = tuple(f"random_urdfs/{i:03d}/{i:03d}.urdf" for i in range(20))
"""pybullet_data's random objects (each about 0.1 m before scaling)."""


@dataclass(frozen=True)
class ObjectKind:
    """A kind of object the scene sampler can place.

    `colors` lists the colour words an instance may take (rendered with PALETTE); an empty tuple keeps the
    asset's own look, described by `native_color` (or no colour word). Procedural kinds come in "small"
    and "large" sizes; assets have one size, set by `scale`.
    """

    category: str
    shape: ShapeKind
    weight: float
    colors: tuple[str, ...] = ()
    native_color: str | None = None
    sized: bool = False
    assets: tuple[str, ...] = ()
    scale: float = 1.0


CATALOGUE: tuple[ObjectKind, ...] = (
    ObjectKind("box", "box", weight=3.0, colors=ALL_COLORS, sized=True),
    ObjectKind("cylinder", "cylinder", weight=2.0, colors=ALL_COLORS, sized=True),
    ObjectKind("ball", "sphere", weight=1.5, colors=ALL_COLORS, sized=True),
    ObjectKind("mug", "asset", weight=1.5, colors=("red", "blue", "green", "white", "yellow"),
               assets=("objects/mug.urdf",), scale=0.75),
    ObjectKind("lego brick", "asset", weight=1.0, colors=("red", "blue", "green", "yellow"),
               assets=("lego/lego.urdf",), scale=1.6),
    ObjectKind("toy", "asset", weight=1.5, colors=ALL_COLORS, assets=RANDOM_OBJECT_ASSETS, scale=0.5),
    ObjectKind("duck", "asset", weight=0.8, native_color="yellow", assets=("duck_vhacd.urdf",), scale=0.8),
    ObjectKind("teddy bear", "asset", weight=0.6, assets=("teddy_vhacd.urdf",), scale=0.8),
    ObjectKind("wooden block", "asset", weight=0.8, assets=("jenga/jenga.urdf",), scale=0.8),
    ObjectKind("tray", "asset", weight=0.5, assets=("tray/traybox.urdf",), scale=0.3),
)  # fmt: skip

CATALOGUE_ASSETS: frozenset[str] = frozenset(asset for kind in CATALOGUE for asset in kind.assets)
"""Every asset a scene may name: a scene spec from anywhere else is refused, so no path reaches loadURDF."""


@dataclass(frozen=True)
class ObjectChoice:
    """A sampled catalogue draw: what to build, before it has a pose."""

    kind: ObjectKind
    color: str | None
    size_label: str | None
    asset: str | None
    half_extents: Vec3 | None  # procedural shapes only; assets are measured once loaded

    @property
    def descriptor(self) -> tuple[str, str | None, str | None]:
        """What a referring expression can use to tell this object apart."""
        return (self.kind.category, self.color, self.size_label)

    @property
    def rgba(self) -> Rgba | None:
        """The RGBA override, or None to keep the asset's own appearance."""
        return PALETTE[self.color] if self.color in PALETTE and self.kind.colors else None


def _procedural_half_extents(shape: ShapeKind, size_label: str, rng: np.random.Generator) -> Vec3:
    """Sizes chosen so that every procedural object fits the gripper across at least one axis."""
    small = size_label == "small"
    if shape == "box":
        along = rng.uniform(0.018, 0.026) if small else rng.uniform(0.032, 0.048)
        across = rng.uniform(0.016, 0.024) if small else rng.uniform(0.024, 0.034)
        half_height = rng.uniform(0.015, 0.03) if small else rng.uniform(0.025, 0.05)
        return (float(along), float(across), float(half_height))
    if shape == "cylinder":
        radius = rng.uniform(0.015, 0.022) if small else rng.uniform(0.027, 0.034)
        half_height = rng.uniform(0.02, 0.04) if small else rng.uniform(0.04, 0.06)
        return (float(radius), float(radius), float(half_height))
    if shape == "sphere":
        radius = float(rng.uniform(0.018, 0.024) if small else rng.uniform(0.029, 0.034))
        return (radius, radius, radius)
    raise ValueError(f"not a procedural shape: {shape!r}")


def sample_choice(rng: np.random.Generator) -> ObjectChoice:
    """Draw one catalogue object (kind, colour, size, asset) with the catalogue's weights."""
    weights = np.array([kind.weight for kind in CATALOGUE])
    kind = CATALOGUE[int(rng.choice(len(CATALOGUE), p=weights / weights.sum()))]
    color = str(rng.choice(kind.colors)) if kind.colors else kind.native_color
    size_label = str(rng.choice(["small", "large"])) if kind.sized else None
    asset = str(rng.choice(kind.assets)) if kind.assets else None
    half_extents = _procedural_half_extents(kind.shape, size_label, rng) if size_label else None
    return ObjectChoice(kind, color, size_label, asset, half_extents)


def object_names(descriptors: list[tuple[str, str | None, str | None]]) -> list[str]:
    """Human names for the objects of one scene.

    A name is "<colour> <category>" (or just the category for an uncoloured kind), prefixed with the
    size label when another object shares colour and category, so that names are unique unless two
    objects have identical descriptors, which makes them deliberately ambiguous.
    """
    names = []
    for category, color, size_label in descriptors:
        base = f"{color} {category}" if color else category
        shares_base = sum(1 for c, col, _ in descriptors if (c, col) == (category, color)) > 1
        names.append(f"{size_label} {base}" if shares_base and size_label else base)
    return names
