"""The robot task suite, its ground-truth checks and the evaluation that runs the expert on it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from spacetools.agent.policies.robot_expert import RobotExpertPolicy
from spacetools.bench.robot.checks import check
from spacetools.bench.robot.evaluate import EPISODES_FILE, SUMMARY_FILE, evaluate_robot, summarize
from spacetools.bench.robot.report import TARGET_COLOR
from spacetools.bench.robot.tasks import RobotTask, initial_observation, make_task
from spacetools.sim.freespace import placement
from spacetools.sim.realism import get_profile, perturb_depth, perturb_sensor_depth
from spacetools.sim.robot import RobotWorld
from spacetools.sim.scene import SceneSpec
from spacetools.toolshed.connection import DEFAULT_PROFILE


@pytest.fixture(scope="module")
def tray_task() -> RobotTask:
    task = make_task("pick_place", 0, 0)
    assert task.goal is not None and task.goal.relation == "in"
    return task


def test_tasks_are_seeded_and_hide_their_truth(tray_task: RobotTask) -> None:
    again = make_task("pick_place", 0, 0)
    assert (again.question, again.scene, again.target, again.goal) == (
        tray_task.question,
        tray_task.scene,
        tray_task.target,
        tray_task.goal,
    )
    assert tray_task.question.endswith("and place it in the tray.")
    episode = tray_task.episode_input()
    assert episode.task.extra_info == {"category": "pick_place"}
    assert episode.attachments == [{"scene": tray_task.scene}] and episode.task.images[0] is tray_task.image
    assert tray_task.scene not in repr(vars(episode.task))
    relational = make_task("relational_pick", 0, 0)
    spec = SceneSpec.model_validate_json(relational.scene)
    name = spec.objects[relational.target].name
    assert len(spec.object_named(name)) == 2  # two objects share the name; the phrase picks one


def _world(task: RobotTask) -> RobotWorld:
    return RobotWorld.from_spec(SceneSpec.model_validate_json(task.scene), record_frames=False)


def _grasp(world: RobotWorld, index: int) -> None:
    truth = world.scene.ground_truth()[index]
    assert truth.grasp_pose is not None
    assert world.grasp(world.camera.cam_to_world @ truth.grasp_pose).success


def test_checks_score_pick_and_place_on_the_world(tray_task: RobotTask) -> None:
    nothing = check(tray_task, None)
    assert (nothing.points, nothing.possible) == (0, 2)
    tray = initial_observation(tray_task).footprint(tray_task.goal.anchor).centroid  # type: ignore[union-attr]
    with _world(tray_task) as world:
        _grasp(world, tray_task.target)
        held = check(tray_task, world)
        assert held.picked and held.placed is False and held.reason == "the object is still in the gripper"
        world.place([tray.x, tray.y, 0.01])
        placed = check(tray_task, world)
        assert (placed.picked, placed.placed, placed.points) == (True, True, 2)
    with _world(tray_task) as world:
        _grasp(world, tray_task.target)
        world.place([tray.x + 0.2 * np.sign(-tray.x or 1.0), -0.15, 0.0])  # well outside the tray
        missed = check(tray_task, world)
        assert (missed.points, missed.placed) == (1, False) and "outside the goal region" in missed.reason


def test_picking_the_wrong_object_scores_nothing() -> None:
    task = make_task("relational_pick", 0, 0)
    spec = SceneSpec.model_validate_json(task.scene)
    twin = next(o.index for o in spec.object_named(spec.objects[task.target].name) if o.index != task.target)
    with _world(task) as world:
        _grasp(world, twin)
        outcome = check(task, world)
    assert (outcome.points, outcome.reason) == (0, "picked the wrong object")


def test_a_place_beside_a_pair_must_end_beyond_both() -> None:
    task = make_task("pick_place", 0, 1)
    goal = task.goal
    assert goal is not None and goal.twin is not None and goal.relation == "right of"
    obs = initial_observation(task)
    name = obs.objects[goal.anchor].name
    assert obs.objects[goal.twin].name == name and name == "wooden block"
    assert task.question == "Pick up the white mug and place it to the right of the two wooden blocks."
    outer, inner = (float(obs.centre(i) @ obs.right) for i in (goal.anchor, goal.twin))
    assert outer > inner  # the anchor is the outer one on the asked side
    spot = placement(obs, task.target, goal.anchor, goal.relation)
    other_side = placement(obs, task.target, goal.twin, "left of")
    assert spot is not None and other_side is not None
    with _world(task) as world:
        _grasp(world, task.target)
        world.place(spot)
        outcome = check(task, world)
        assert (outcome.points, outcome.placed) == (2, True), outcome.reason
    with _world(task) as world:
        _grasp(world, task.target)
        world.place(other_side)  # beside the pair, but on the wrong side of it
        outcome = check(task, world)
        assert (outcome.points, outcome.placed) == (1, False)
        assert outcome.reason == "the object rests outside the goal region (right of the two wooden blocks)"


def test_pick_place_goals_keep_their_draws_beside_the_new_pair_goal() -> None:
    tasks = [make_task("pick_place", 0, i) for i in range(6)]
    assert [_kind(task) for task in tasks] == ["in", "pair", "side", "in", "side", "pair"]
    # Tasks without a pair goal are the ones drawn before the pair goal existed (same seeds, same rng).
    assert [tasks[i].question for i in (0, 2, 3, 4)] == [
        "Pick up the black box and place it in the tray.",
        "Pick up the red ball and place it in front of the red box.",
        "Pick up the yellow duck and place it in the tray.",
        "Pick up the black cylinder and place it to the left of the teddy bear.",
    ]


def _kind(task: RobotTask) -> str:
    assert task.goal is not None
    return "in" if task.goal.relation == "in" else ("pair" if task.goal.twin is not None else "side")


@pytest.mark.slow
def test_the_expert_picks_with_tools_only_and_the_run_writes_a_report(tmp_path: Path) -> None:
    task = make_task("pick", 0, 1)
    results = asyncio.run(
        evaluate_robot(RobotExpertPolicy(), [task], profile="exact", seed=4, out_dir=tmp_path)
    )
    (result,) = results
    names = [call.name for call in result.trajectory.tool_calls]
    assert names == [
        *["roborefer.detect_one"] * 3,  # the expert takes the median of three pointings
        "sam2.segment_from_point",
        "robot.get_depth_with_pointcloud",
        "grasp_generator.compute_grasp",
        "robot.execute_grasp",
    ]
    assert result.outcome.picked and result.trajectory.finish_reason == "answer"
    assert result.time_to_first_motion_s is not None and 0 < result.time_to_first_motion_s < result.wall_s
    assert result.sim_steps > 0 and result.frames
    (summary,) = summarize(results)
    assert (summary.category, summary.success_rate) == ("pick", 1.0)
    row = json.loads((tmp_path / EPISODES_FILE).read_text().splitlines()[0])
    assert row["id"] == task.id and row["points"] == 1
    assert json.loads((tmp_path / SUMMARY_FILE).read_text())[0]["success_rate"] == 1.0
    page = (tmp_path / "report.html").read_text()
    assert task.question in page and "robot.execute_grasp" in page
    # The page names the run at the top, marks the target and shows the calls' pictures.
    head = page[: page.index("<table")]
    assert "robot_scripted" in head and "profile <b>exact</b>" in head and "seed <b>4</b>" in head
    folder = tmp_path / "episodes" / task.id
    assert (folder / "motion.gif").is_file() and (folder / "strip.png").is_file()
    pictures = sorted(path.name for path in folder.glob("call-*.png"))
    assert len(pictures) >= 4  # segmentation, depth, grasp drawn by the report, view after the grasp
    assert all(f"{task.id}/{name}" in page for name in pictures)
    marked = np.asarray(Image.open(folder / "task.png"))
    x0, y0, x1, _ = task.target_box or (0, 0, 0, 0)
    row_at = round(y0 * marked.shape[0]) - 2
    box_edge = marked[row_at, int(x0 * marked.shape[1]) : int(x1 * marked.shape[1])]
    assert (np.abs(box_edge.astype(int) - TARGET_COLOR).sum(axis=1) < 30).mean() > 0.8


def test_the_robot_camera_measures_depth_without_a_global_scale() -> None:
    """At the default profile the robot's RGB-D camera is a depth sensor (mm noise growing with
    distance, no scale error); the monocular estimator keeps its scale error."""
    profile = get_profile(DEFAULT_PROFILE)
    depth = np.full((240, 320), 1.3, dtype=np.float32)
    near = np.full((240, 320), 0.6, dtype=np.float32)
    sensed = [perturb_sensor_depth(depth, profile, np.random.default_rng(seed)) for seed in range(20)]
    # No global scale: every frame's median is within a millimetre of the truth (3% would be 39 mm).
    assert max(abs(float(np.median(frame)) - 1.3) for frame in sensed) <= 0.001
    noise = float(np.std(sensed[0] - depth))
    assert 0.001 < noise < 0.006  # millimetre-level at 1.3 m
    assert float(np.std(perturb_sensor_depth(near, profile, np.random.default_rng(0)) - near)) < noise
    estimated = [perturb_depth(depth, profile, np.random.default_rng(seed)) for seed in range(20)]
    assert max(abs(float(np.median(frame)) - 1.3) for frame in estimated) > 0.02
