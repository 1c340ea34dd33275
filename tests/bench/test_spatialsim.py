"""SpatialSim: determinism, balance, and ground truth that agrees with the rebuilt scenes."""

from __future__ import annotations

import ast
import re
from collections import Counter

import numpy as np
import pytest

from spacetools.bench.dataset import Sample, decode_mask
from spacetools.bench.spatialsim import FAMILIES, generate
from spacetools.bench.spatialsim.generator import check_families, derive_seed
from spacetools.bench.spatialsim.relations import OPPOSITE, RELATIONS, relation_holds
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.scene import SceneSpec
from spacetools.sim.world import Scene

N = 6
SEED = 11


@pytest.fixture(scope="module")
def generated() -> dict[str, list[Sample]]:
    """Every family once, on one process (the pool is covered by the CLI tests)."""
    return generate(N, seed=SEED, workers=1)


def _truths(sample: Sample) -> tuple[dict[str, ObjectTruth], Scene]:
    scene = Scene.from_spec(SceneSpec.model_validate_json(sample.extra_info["scene"]))
    return {t.name: t for t in scene.ground_truth(scene.render())}, scene


@pytest.mark.slow
def test_every_family_has_n_well_formed_samples(generated: dict[str, list[Sample]]) -> None:
    assert list(generated) == list(FAMILIES)
    for name, samples in generated.items():
        assert [s.extra_info["index"] for s in samples] == list(range(N))
        for sample in samples:
            assert sample.data_source == f"spatialsim_{name}"
            assert sample.prompt == [{"role": "user", "content": sample.extra_info["question"]}]
            assert sample.extra_info["question"].startswith("<image>\n")
            assert sample.extra_info["split"] == "test"
            assert sample.images[0].shape == (480, 640, 3)
            SceneSpec.model_validate_json(sample.extra_info["scene"])


@pytest.mark.slow
def test_answers_are_balanced(generated: dict[str, list[Sample]]) -> None:
    yes_no = Counter(s.ground_truth for s in generated["robospatial"] if s.ground_truth in ("Yes", "No"))
    assert yes_no["Yes"] == yes_no["No"] > 0
    for name in ("blinkdepth", "cvb2drelation", "cvb3ddepth"):
        letters = Counter(s.ground_truth for s in generated[name])
        assert letters == {"(A)": N // 2, "(B)": N // 2}, name
    assert {s.extra_info["qa_type"] for s in generated["robospatial"]} == {
        "configuration",
        "compatibility",
        "vacant",
    }


@pytest.mark.slow
def test_configuration_answers_agree_with_positions(generated: dict[str, list[Sample]]) -> None:
    pattern = re.compile(rf"[Ii]s the (.+?) ({'|'.join(RELATIONS)}) the (.+?)\? Answer yes or no\.$")
    checked = 0
    for sample in generated["robospatial"]:
        if sample.extra_info["qa_type"] != "configuration":
            continue
        a, relation, b = pattern.search(sample.question).groups()  # type: ignore[union-attr]
        truths, scene = _truths(sample)
        with scene:
            expected = sample.ground_truth == "Yes"
            assert relation_holds(truths[a], truths[b], relation) is expected
            # Swapping the objects and the relation reads the same fact (never inside a margin).
            assert relation_holds(truths[b], truths[a], OPPOSITE[relation]) is expected
            checked += 1
    assert checked >= 2


@pytest.mark.slow
def test_vacant_points_lie_on_bare_table(generated: dict[str, list[Sample]]) -> None:
    for sample in generated["robospatial"]:
        if sample.extra_info["qa_type"] != "vacant":
            continue
        points = np.array(ast.literal_eval(sample.ground_truth))
        assert len(points) >= 8
        scene = Scene.from_spec(SceneSpec.model_validate_json(sample.extra_info["scene"]))
        with scene:
            view = scene.render()
        height, width = view.segmentation.shape
        pixels = np.minimum((points * [width, height]).astype(int), [width - 1, height - 1])
        assert np.all(view.segmentation[pixels[:, 1], pixels[:, 0]] == -1)


@pytest.mark.slow
def test_blink_points_and_letters_agree_with_depth(generated: dict[str, list[Sample]]) -> None:
    for sample in generated["blinkdepth"]:
        scene = Scene.from_spec(SceneSpec.model_validate_json(sample.extra_info["scene"]))
        with scene:
            depth = scene.render().depth
        height, width = depth.shape
        (ua, va), (ub, vb) = sample.extra_info["marked_points"]
        depth_a = depth[min(int(va * height), height - 1), min(int(ua * width), width - 1)]
        depth_b = depth[min(int(vb * height), height - 1), min(int(ub * width), width - 1)]
        assert abs(depth_a - depth_b) >= 0.05
        assert sample.ground_truth == ("(A)" if depth_a < depth_b else "(B)")
        assert sample.extra_info["choices"] == ["A", "B"]


@pytest.mark.slow
def test_pose_truth_is_the_scene_box_and_masks_decode(generated: dict[str, list[Sample]]) -> None:
    for sample in generated["boppose"][:2]:
        name = re.search(r"(?:of|encloses) the (.+?)(?: in the image)?[.?] ", sample.question).group(1)  # type: ignore[union-attr]
        truths, scene = _truths(sample)
        with scene:
            expected = truths[name].obb_corners_2d
        assert np.allclose(np.array(ast.literal_eval(sample.ground_truth)), expected, atol=1e-3)
    for name in ("reflocation", "refplacement"):
        for sample in generated[name]:
            mask = decode_mask(sample.ground_truth)
            assert mask.shape == (480, 640) and mask.sum() > 0
            (u, v) = ast.literal_eval(sample.extra_info["answer"])[0]
            assert mask[int(v * 480), int(u * 640)], "the reference answer lies inside the mask"


def test_seeds_depend_only_on_seed_family_and_index() -> None:
    first = derive_seed(3, "blinkdepth", 5, 0).generate_state(4)
    assert np.array_equal(first, derive_seed(3, "blinkdepth", 5, 0).generate_state(4))
    assert not np.array_equal(first, derive_seed(3, "cvb3ddepth", 5, 0).generate_state(4))
    assert not np.array_equal(first, derive_seed(4, "blinkdepth", 5, 0).generate_state(4))


def test_family_choice_does_not_change_a_family() -> None:
    alone = generate(2, seed=5, families=["cvb2drelation"], workers=1)["cvb2drelation"]
    together = generate(2, seed=5, families=["detect2d", "cvb2drelation"], workers=1)["cvb2drelation"]
    for a, b in zip(alone, together, strict=True):
        assert a.question == b.question and a.ground_truth == b.ground_truth
        assert np.array_equal(a.images[0], b.images[0])


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown family.*valid"):
        check_families(["robospatial", "nonsense"])
    with pytest.raises(ValueError, match="positive"):
        generate(-1)
