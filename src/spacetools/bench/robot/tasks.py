"""The robot task suite: seeded tabletop tasks in the paper's three categories, with their truth.

- Pick: "Pick up the red box."
- Relational pick: two objects share a name and a spatial phrase picks one ("the red mug closer to
  the camera", "the left one of the two red mugs").
- Pick & place: "Pick up the red ball and place it in the tray." / "… in front of the white box." /
  "… to the left of the two red mugs." (beyond both of a pair of like objects).

A `RobotTask` holds the question and image a policy sees and, apart from them, the truth its success
checks read (`target`, `goal`); `episode_input()` gives the policy-facing `Task` (its scene for the tools only), never the truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from shapely.geometry import Point

from spacetools.agent.types import EpisodeInput, Task
from spacetools.sim.freespace import pair_band, placement
from spacetools.sim.groundtruth import ObjectTruth
from spacetools.sim.layout import build_scene
from spacetools.sim.observation import Observation
from spacetools.sim.world import Scene

Category = Literal["pick", "relational_pick", "pick_place"]
CATEGORIES: tuple[Category, ...] = ("pick", "relational_pick", "pick_place")
DATA_SOURCE = "robot"
GRASPABLE = frozenset({"box", "cylinder", "ball", "lego brick", "toy", "duck", "wooden block", "mug"})
MIN_VISIBLE = 0.6
MIN_DEPTH_GAP_M = 0.06
MIN_LATERAL_GAP_M = 0.06
MAX_SCENE_ATTEMPTS = 80
PLACE_SIDES = ("left of", "right of", "in front of")
"""Sides a place task may ask for ("behind" would put the object under the arm's base)."""
TRAY_SHARE, SIDE_SHARE = 0.5, 0.3
"""The pick & place goal draw: a tray below TRAY_SHARE, the side of one object for the next SIDE_SHARE,
else a side of a pair (a scene for it is found more often, so about a third of the tasks)."""
_SIDE_WORDS = {"left of": "to the left of", "right of": "to the right of", "in front of": "in front of"}


@dataclass(frozen=True)
class PlaceGoal:
    """Where the picked object must come to rest: in a container, or on a side of an anchor object.

    With `twin` the anchor is one of a pair of like objects ("left of the two mugs"): the object must
    come to rest beyond both, and `anchor` is the outer one on that side.
    """

    anchor: int
    relation: Literal["in", "left of", "right of", "in front of"]
    twin: int | None = None


@dataclass
class RobotTask:
    """One robot episode: what the policy sees (question, image, scene) and the truth it is scored on."""

    id: str
    category: Category
    question: str
    image: np.ndarray
    scene: str
    target: int
    goal: PlaceGoal | None = None
    target_box: tuple[float, float, float, float] | None = None
    """The target's normalized 2D box in `image` (x0, y0, x1, y1), for the report to mark; truth."""

    def episode_input(self) -> EpisodeInput:
        """The episode as the rollout runs it: the policy sees the question and the image; the scene goes
        to the tools' session alone (the robot's world); the truth to neither."""
        task = Task(
            id=self.id,
            data_source=DATA_SOURCE,
            question=self.question,
            images=[self.image],
            extra_info={"category": self.category},
        )
        return EpisodeInput(task, attachments=[{"scene": self.scene}])


def plural(name: str) -> str:
    """A noun phrase's plural ("red box" -> "red boxes")."""
    return name + ("es" if name.endswith(("x", "s", "ch", "sh")) else "s")


def _graspable(truth: ObjectTruth) -> bool:
    return (
        truth.category in GRASPABLE and truth.grasp_pose is not None and truth.visible_fraction >= MIN_VISIBLE
    )


def _pick(obs: Observation, rng: np.random.Generator) -> tuple[str, int, None] | None:
    counts = {name: sum(o.name == name for o in obs.objects) for name in {o.name for o in obs.objects}}
    options = [t.index for t in obs.truths if _graspable(t) and counts[t.name] == 1]
    if not options:
        return None
    target = int(rng.choice(options))
    return f"Pick up the {obs.truths[target].name}.", target, None


def _first_pair(names: list[str]) -> tuple[str, int, int] | None:
    """The first name (in scene order) that two objects share, with their indices.

    Scene order, not a set's: a set of strings iterates in a per-process hash order, which would make
    the task drawn from a seed differ between runs.
    """
    for name in names:
        if names.count(name) == 2:
            a, b = (i for i, n in enumerate(names) if n == name)
            return name, a, b
    return None


def _relational(obs: Observation, rng: np.random.Generator) -> tuple[str, int, None] | None:
    pair = _first_pair([o.name for o in obs.objects])
    if pair is None:
        return None
    name, a, b = pair
    if not (_graspable(obs.truths[a]) and _graspable(obs.truths[b])):
        return None
    depth_gap = float(obs.truths[a].position_camera[2] - obs.truths[b].position_camera[2])
    lateral_gap = float((obs.centre(a) - obs.centre(b)) @ obs.right)
    options = []
    if abs(depth_gap) >= MIN_DEPTH_GAP_M:
        near, far = (a, b) if depth_gap < 0 else (b, a)
        options += [(f"Pick up the {name} closer to the camera.", near),
                    (f"Pick up the {name} farther from the camera.", far)]  # fmt: skip
    if abs(lateral_gap) >= MIN_LATERAL_GAP_M:
        left, right = (a, b) if lateral_gap < 0 else (b, a)
        options += [(f"Pick up the left one of the two {plural(name)}.", left),
                    (f"Pick up the right one of the two {plural(name)}.", right)]  # fmt: skip
    if not options:
        return None
    question, target = options[int(rng.integers(len(options)))]
    return question, target, None


def _pick_place(obs: Observation, rng: np.random.Generator) -> tuple[str, int, PlaceGoal] | None:
    names = [o.name for o in obs.objects]
    unique = [i for i, n in enumerate(names) if names.count(n) == 1]
    items = [i for i in unique if _graspable(obs.truths[i])]
    if not items:
        return None
    item = int(rng.choice(items))
    trays = [i for i in unique if obs.objects[i].category == "tray" and obs.truths[i].visible_fraction > 0.8]
    if trays:
        return f"Pick up the {names[item]} and place it in the tray.", item, PlaceGoal(trays[0], "in")
    anchors = [i for i in unique if i != item and obs.objects[i].category != "tray"]
    pairs = [(a, s) for a in anchors for s in PLACE_SIDES if placement(obs, item, a, s) is not None]
    if not pairs:
        return None
    anchor, side = pairs[int(rng.integers(len(pairs)))]
    question = f"Pick up the {names[item]} and place it {_SIDE_WORDS[side]} the {names[anchor]}."
    return question, item, PlaceGoal(anchor, side)  # type: ignore[arg-type]


def _place_beside_pair(obs: Observation, rng: np.random.Generator) -> tuple[str, int, PlaceGoal] | None:
    """ "… place it to the left of the two red mugs": a unique item goes beyond both of a pair."""
    names = [o.name for o in obs.objects]
    pair = _first_pair(names)
    if pair is None:
        return None
    pair_name, a, b = pair
    lateral_gap = float((obs.centre(a) - obs.centre(b)) @ obs.right)
    seen = min(obs.truths[a].visible_fraction, obs.truths[b].visible_fraction)
    if abs(lateral_gap) < MIN_LATERAL_GAP_M or seen < MIN_VISIBLE:
        return None
    pair_words = set(pair_name.split())
    # Not an item the pair's name also describes ("the two mugs" beside a "red mug" would be three).
    items = [
        i
        for i, n in enumerate(names)
        if names.count(n) == 1
        and _graspable(obs.truths[i])
        and not pair_words <= {*n.split(), obs.objects[i].category}
    ]
    if not items:
        return None
    item = int(rng.choice(items))
    left, right = (a, b) if lateral_gap < 0 else (b, a)
    options = []  # ("in front of the two mugs" is ambiguous: left and right only)
    for side, outer, inner in (("left of", left, right), ("right of", right, left)):
        spot = placement(obs, item, outer, side)
        if spot is not None and pair_band(obs, outer, inner, side).contains(Point(spot[:2])):
            options.append((side, outer, inner))
    if not options:
        return None
    side, outer, inner = options[int(rng.integers(len(options)))]
    question = f"Pick up the {names[item]} and place it {_SIDE_WORDS[side]} the two {plural(pair_name)}."
    return question, item, PlaceGoal(outer, side, twin=inner)  # type: ignore[arg-type]


_DRAWS = {"pick": _pick, "relational_pick": _relational, "pick_place": _pick_place}


def make_task(
    category: Category, seed: int, index: int = 0, width: int = 640, height: int = 480
) -> RobotTask:
    """The seeded task `index` of a category: scenes are drawn until one offers such a task."""
    rng = np.random.default_rng([seed, CATEGORIES.index(category), index])
    for _ in range(MAX_SCENE_ATTEMPTS):
        scene_seed = int(rng.integers(2**31))
        n_objects = int(rng.integers(3, 7))
        # Which pick & place goal: drawn here (no draw happens in between), so that the tray and the
        # single-anchor tasks of a seed stay what they were before the pair goal existed.
        goal_draw = rng.random() if category == "pick_place" else 0.0
        beside_pair = category == "pick_place" and goal_draw >= TRAY_SHARE + SIDE_SHARE
        scene = build_scene(
            scene_seed,
            n_objects=n_objects,
            with_robot=True,
            width=width,
            height=height,
            allow_duplicates=category == "relational_pick" or beside_pair,
        )
        with scene:
            obs = Observation.from_scene(scene)
            # A pick & place scene wants a tray half of the time; others fall back to a side goal.
            if category == "pick_place" and goal_draw < TRAY_SHARE and not _has_tray(obs):
                continue
            draw = _place_beside_pair if beside_pair else _DRAWS[category]
            made = draw(obs, rng)
            if made is None:
                continue
            question, target, goal = made
            return RobotTask(
                id=f"{category}-{seed}-{index}",
                category=category,
                question=question,
                image=obs.view.rgb,
                scene=scene.spec.model_dump_json(),
                target=target,
                goal=goal,
                target_box=tuple(float(c) for c in obs.truths[target].bbox_2d),  # type: ignore[arg-type]
            )
    raise RuntimeError(
        f"no {category} task found in {MAX_SCENE_ATTEMPTS} scenes (seed {seed}, index {index})"
    )


def _has_tray(obs: Observation) -> bool:
    return any(o.category == "tray" for o in obs.objects)


def make_tasks(
    per_category: int, seed: int = 0, categories: tuple[Category, ...] = CATEGORIES
) -> list[RobotTask]:
    """`per_category` seeded tasks of each category, category by category."""
    return [make_task(category, seed, i) for category in categories for i in range(per_category)]


def initial_observation(task: RobotTask) -> Observation:
    """The task's scene as it was set up (for the success checks)."""
    from spacetools.sim.scene import SceneSpec

    with Scene.from_spec(SceneSpec.model_validate_json(task.scene)) as scene:
        return Observation.from_scene(scene)
