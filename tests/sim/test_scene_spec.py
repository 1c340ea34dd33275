"""SceneSpec / ObjectSpec validation and exact JSON round trips."""

import pytest
from pydantic import ValidationError

from spacetools.sim.camera import Camera
from spacetools.sim.catalogue import object_names
from spacetools.sim.scene import ObjectSpec, SceneSpec


def _object(index: int, **changes: object) -> ObjectSpec:
    fields = {
        "index": index,
        "name": "red box",
        "category": "box",
        "color": "red",
        "shape": "box",
        "position": (0.1, -0.023456789012345, 0.02),
        "orientation": (0.0, 0.0, 0.38268343236508984, 0.9238795325112867),
        "half_extents": (0.02, 0.03, 0.02),
    }
    fields.update(changes)
    return ObjectSpec.model_validate(fields)


def test_json_round_trip_is_exact() -> None:
    spec = SceneSpec(seed=7, objects=[_object(0), _object(1, name="mug", category="mug", shape="asset",
                                                          asset="objects/mug.urdf", color=None)],
                     camera=Camera.look_at((0, -1, 1), (0, 0, 0)).to_dict())  # fmt: skip
    text = spec.model_dump_json()
    again = SceneSpec.model_validate_json(text)
    assert again == spec
    assert again.model_dump_json() == text


def test_invalid_specs_are_rejected() -> None:
    camera = Camera.look_at((0, -1, 1), (0, 0, 0)).to_dict()
    with pytest.raises(ValidationError, match="indices"):
        SceneSpec(seed=0, objects=[_object(1)], camera=camera)
    with pytest.raises(ValidationError, match="asset"):
        _object(0, shape="asset")
    with pytest.raises(ValidationError, match="half_extents"):
        _object(0, half_extents=(0.0, 0.1, 0.1))
    with pytest.raises(ValidationError, match="missing keys"):
        SceneSpec(seed=0, objects=[], camera={"width": 3})


def test_names_are_minimal_and_unique() -> None:
    names = object_names(
        [("box", "red", "small"), ("box", "red", "large"), ("box", "blue", "small"), ("mug", "red", None),
         ("teddy bear", None, None)]
    )  # fmt: skip
    assert names == ["small red box", "large red box", "blue box", "red mug", "teddy bear"]
    assert object_names([("mug", "red", None), ("mug", "red", None)]) == ["red mug", "red mug"]
