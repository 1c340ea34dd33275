"""SpatialSim: determinism, balance, and ground truth that agrees with the rebuilt scenes."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
import shapely

from spacetools.bench.dataset import Sample
from spacetools.bench.spatialsim import FAMILIES, generate
from spacetools.bench.spatialsim.generator import check_families, derive_seed, uses_duplicates
from spacetools.bench.spatialsim.relations import OPPOSITE, RELATIONS, relation_holds
from spacetools.bench.spatialsim.robospatial import VACANT_INSIDE_POINTS, VACANT_OUTLINE_POINTS, vacant_points
from spacetools.kit.imagecodec import decode_mask
from spacetools.rewards import BENCHMARKS, compute_score
from spacetools.rewards.formats import format_points, parse_points
from spacetools.sim.freespace import compatibility, vacant_region
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.observation import Observation
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
    checked = 0
    for sample in generated["robospatial"]:
        if sample.extra_info["qa_type"] != "vacant":
            continue
        points = np.array(parse_points(sample.ground_truth))
        assert 9 <= len(points) <= VACANT_OUTLINE_POINTS + VACANT_INSIDE_POINTS
        scene = Scene.from_spec(SceneSpec.model_validate_json(sample.extra_info["scene"]))
        with scene:
            view = scene.render()
        height, width = view.segmentation.shape
        pixels = np.minimum((points * [width, height]).astype(int), [width - 1, height - 1])
        assert np.all(view.segmentation[pixels[:, 1], pixels[:, 0]] == -1)
        # The reference answer (the region's deepest point) is right under the official hull scorer.
        score = compute_score(sample.data_source, sample.extra_info["answer"], sample.ground_truth)
        assert score["score"] == 1.0, sample.extra_info["index"]
        checked += 1
    assert checked >= 1


def _l_shaped_and_split_mask() -> np.ndarray:
    """A 240x320 free region that is neither convex nor connected: an L and a separate blob."""
    mask = np.zeros((240, 320), dtype=bool)
    mask[40:140, 30:60] = True  # the L's upright
    mask[110:140, 30:160] = True  # its foot
    ys, xs = np.mgrid[0:240, 0:320]
    mask |= (xs - 250) ** 2 + (ys - 180) ** 2 < 25**2  # a round patch apart from it
    return mask


def test_vacant_points_describe_the_region_for_a_hull_scorer() -> None:
    mask = _l_shaped_and_split_mask()
    found = vacant_points(mask, np.random.default_rng(0))
    assert found is not None
    points, deepest = found
    assert 9 <= len(points) <= VACANT_OUTLINE_POINTS + VACANT_INSIDE_POINTS
    # Every listed point is a region pixel, still after the 3-decimal rounding of the ground truth.
    rounded = np.array(parse_points(format_points(points)))
    height, width = mask.shape
    assert np.all(mask[(rounded[:, 1] * height).astype(int), (rounded[:, 0] * width).astype(int)])
    assert len({tuple(p) for p in rounded.tolist()}) == len(rounded), "no point listed twice"
    # Their hull covers the region (but for a thin rim), so any point of the region scores.
    hull = shapely.MultiPoint(rounded * [width, height]).convex_hull
    ys, xs = np.nonzero(mask)
    covered = shapely.contains_xy(hull, xs + 0.5, ys + 0.5)
    assert covered.mean() > 0.99
    assert hull.contains(shapely.Point(deepest * [width, height]))
    assert any(np.allclose(p, deepest) for p in points)


def test_vacant_points_reject_small_or_flat_regions() -> None:
    rng = np.random.default_rng(0)
    assert vacant_points(np.zeros((60, 80), dtype=bool), rng) is None
    sliver = np.zeros((60, 320), dtype=bool)
    sliver[30, 5:300] = True  # enough pixels, but a line, not a region
    assert vacant_points(sliver, rng) is None
    patch = np.zeros((60, 80), dtype=bool)
    patch[10:22, 10:22] = True  # 144 pixels: too small to point into
    assert vacant_points(patch, rng) is None


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
        found = re.search(r"(?:of|encloses) the (.+?)(?: in the image)?[.?] ", sample.question)
        assert found is not None, sample.question
        name = found.group(1)
        truths, scene = _truths(sample)
        with scene:
            expected = truths[name].obb_corners_2d
        assert np.allclose(np.array(parse_points(sample.ground_truth)), expected, atol=1e-3)
    for name in ("reflocation", "refplacement"):
        for sample in generated[name]:
            mask = decode_mask(sample.ground_truth)
            assert mask.shape == (480, 640) and mask.sum() > 0
            (u, v) = parse_points(sample.extra_info["answer"])[0]
            assert mask[int(v * 480), int(u * 640)], "the reference answer lies inside the mask"


_PLACEMENT_RE = re.compile(
    r"(?:free space|vacant area on the table|free table space) (?P<side>to the left of|to the right of|"
    r"in front of|behind) the (?P<b>.+?) (?:where the (?P<a1>.+?) could|suitable for placing the "
    r"(?P<a2>.+?)\.|to put the (?P<a3>.+?) down)"
)


@pytest.mark.slow
def test_placement_questions_ask_only_where_the_item_fits(generated: dict[str, list[Sample]]) -> None:
    for sample in generated["refplacement"]:
        found = _PLACEMENT_RE.search(sample.question)
        assert found is not None, sample.question
        item_name = found.group("a1") or found.group("a2") or found.group("a3")
        side = found.group("side").removeprefix("to the ")
        scene = Scene.from_spec(SceneSpec.model_validate_json(sample.extra_info["scene"]))
        with scene:
            obs = Observation.from_scene(scene)
        [item] = scene.spec.object_named(item_name)
        [anchor] = scene.spec.object_named(found.group("b"))
        assert compatibility(obs, item.index, anchor.index, side) is True, sample.question
        assert np.array_equal(
            obs.region_mask(vacant_region(obs, anchor.index, side)), decode_mask(sample.ground_truth)
        )


def test_reflocation_asks_about_one_of_two_identical_objects() -> None:
    pattern = re.compile(
        r"the (?P<a>.+?) (?:that is )?(?P<relation>left of|right of|in front of|behind) the (?P<b>.+?)"
        r"(?: in the image)?[.?] "
    )
    samples = generate(6, seed=SEED, families=["reflocation"], workers=1)["reflocation"]
    on_twins = 0
    for sample in samples:
        spec = SceneSpec.model_validate_json(sample.extra_info["scene"])
        names = Counter(o.name for o in spec.objects)
        twin_scene = uses_duplicates(FAMILIES["reflocation"], sample.extra_info["index"] // 3)
        assert twin_scene or max(names.values()) == 1  # only every other scene group has twins
        if not twin_scene or max(names.values()) == 1:
            continue  # a twin that found no room on the table is replaced by another object
        on_twins += 1
        found = pattern.search(sample.question)
        assert found, sample.question
        assert names[found.group("a")] == 2, sample.question  # the question names the twins
        with Scene.from_spec(spec) as scene:
            truths = scene.ground_truth(scene.render())
        [anchor] = [t for t in truths if t.name == found.group("b")]
        twins = [t for t in truths if t.name == found.group("a")]
        holds = [relation_holds(t, anchor, found.group("relation")) for t in twins]
        assert sorted(holds, key=str) == [False, True], sample.question
        picked = twins[holds.index(True)]
        assert np.array_equal(picked.mask, decode_mask(sample.ground_truth))
    assert on_twins >= 2


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


def test_every_family_is_a_registered_benchmark() -> None:
    assert [family.data_source for family in FAMILIES.values()] == [
        key for key, entry in BENCHMARKS.items() if entry.spatialsim
    ]
    assert FAMILIES["cvb3ddepth"].benchmark == "CV-Bench"


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_generation_workers_run_one_blas_thread_each() -> None:
    """The workers take a core each; BLAS threads of their own would only compete with the other worker."""
    from spacetools.bench.spatialsim.generator import worker_pool

    with worker_pool(1) as pool:
        threads = pool.submit(_blas_threads).result()
    assert threads and set(threads) == {1}  # numpy's OpenBLAS and scipy's, each capped
