"""SpatialSim generation: deterministic scene seeds per (seed, family, index), a process pool, parquet export.

A question's scene seed depends only on the run seed, its family and its index (consecutive indices
share a scene; a retry counter picks fresh scenes when one offers no unambiguous question), so a
family's questions are the same whichever other families are generated alongside it, and the same
arguments always give identical files. Families that need deliberately ambiguous names pose every
other scene group on scenes where two objects share one name.
"""

from __future__ import annotations

import multiprocessing
import os
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from spacetools.bench.dataset import Sample, write_parquet
from spacetools.bench.spatialsim import bopask, choice, refspatial, robospatial
from spacetools.bench.spatialsim.context import SceneContext
from spacetools.bench.spatialsim.question import Question
from spacetools.rewards.benchmarks import BENCHMARKS, SPATIALSIM_PREFIX
from spacetools.rewards.formats import format_yes_no
from spacetools.sim.layout import build_scene

#: Every family takes (context, rng, question index); only families that balance answers use the index.
FamilyGenerator = Callable[[SceneContext, np.random.Generator, int], Question | None]


@dataclass(frozen=True)
class Family:
    """One question family and its generator; what its answers are, how they are scored and which
    original benchmark it imitates are its data source's entry in the benchmark registry."""

    name: str
    make: FamilyGenerator
    #: Whether every other scene group holds two identical objects (the generator must then ask about one).
    duplicate_scenes: bool = False

    @property
    def data_source(self) -> str:
        """The key an evaluation dispatches on: `spatialsim_<family>`."""
        return SPATIALSIM_PREFIX + self.name

    @property
    def benchmark(self) -> str:
        """The original benchmark the family imitates (from the registry)."""
        return BENCHMARKS[self.data_source].suite


#: The SpatialSim families, one per ``spatialsim_*`` entry of the benchmark registry.
FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family("robospatial", robospatial.generate),
        Family("reflocation", refspatial.location, duplicate_scenes=True),
        Family("refplacement", refspatial.placement),
        Family("blinkdepth", choice.blink_depth),
        Family("cvb2drelation", choice.cvb_2d_relation),
        Family("cvb3ddepth", choice.cvb_3d_depth),
        Family("boppose", bopask.pose),
        Family("bopgrasp", bopask.grasp),
        Family("detect2d", bopask.detect),
    )
}

#: Scenes tried for one question before giving up (each retry is a fresh scene).
MAX_ATTEMPTS = 25
#: Consecutive questions of a family posed on one scene (rendering dominates the cost of a question).
QUESTIONS_PER_SCENE = 3
#: Draws on the shared scene (rejecting repeats of a question already posed there) before fresh scenes.
SHARED_SCENE_TRIES = 3
IMAGE_SIZE = (640, 480)


def check_families(names: Sequence[str] | None) -> list[str]:
    """The requested family names (all when None), rejecting unknown ones with the valid list."""
    if names is None:
        return list(FAMILIES)
    unknown = [name for name in names if name not in FAMILIES]
    if unknown:
        raise ValueError(
            f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {unknown}; valid: {list(FAMILIES)}"
        )
    return list(dict.fromkeys(names))


def derive_seed(seed: int, family: str, *key: int) -> np.random.SeedSequence:
    """A seed sequence for (run seed, family, key...): independent of which other families run."""
    return np.random.SeedSequence([seed, zlib.crc32(family.encode()), *key])


def _scene_id(sequence: np.random.SeedSequence) -> int:
    return int(sequence.generate_state(1)[0] & 0x7FFFFFFF)


def uses_duplicates(family: Family, group: int) -> bool:
    """Whether a family's scene group (its shared scene and its retries) has two same-named objects."""
    return family.duplicate_scenes and group % 2 == 0


def _render(scene_id: int, duplicates: bool = False) -> SceneContext | None:
    """The rendered scene of a seed, or None for the rare seed whose objects cannot be settled."""
    width, height = IMAGE_SIZE
    try:
        scene = build_scene(scene_id, width=width, height=height, allow_duplicates=duplicates)
    except RuntimeError:
        return None  # the question simply moves on to its next derived seed
    with scene:
        view = scene.render()
        return SceneContext(spec=scene.spec, view=view, truths=scene.ground_truth(view))


def _to_sample(family: Family, index: int, question: Question, ctx: SceneContext) -> Sample:
    extra_info = {
        "answer": question.answer,
        "choices": question.choices,
        "index": index,
        "question": "<image>\n" + question.text,
        "split": "test",
        "qa_type": question.qa_type,
        "category": family.benchmark,
        "scene": ctx.spec.model_dump_json(),
        "image_index": 0,
    }
    if question.marked_points is not None:
        extra_info["marked_points"] = question.marked_points
    return Sample(
        data_source=family.data_source,
        prompt=[{"role": "user", "content": "<image>\n" + question.text}],
        images=[question.image],
        ability="spatial",
        ground_truth=question.ground_truth,
        style="rule",
        extra_info=extra_info,
    )


def _repeat_key(question: Question) -> str:
    """What makes two questions on one scene the same: the ground truth of open answers (same object or
    region), the text for class answers ("Yes", "(A)") that many different questions share."""
    return (
        question.text
        if question.ground_truth in (format_yes_no(True), format_yes_no(False)) or question.choices
        else question.ground_truth
    )


def generate_group(seed: int, family_name: str, group: int, count: int) -> list[Sample]:
    """Questions `group * QUESTIONS_PER_SCENE ...` (`count` of them) of a family.

    They share one scene; a question the shared scene cannot pose unambiguously is retried on fresh
    scenes seeded by its own index and attempt number (with duplicates whenever the shared scene has them).
    """
    family = FAMILIES[family_name]
    duplicates = uses_duplicates(family, group)
    shared = _render(_scene_id(derive_seed(seed, family_name, group, 0, 0)), duplicates)
    samples: list[Sample] = []
    asked: set[str] = set()  # questions already posed on the shared scene, to keep a group diverse
    for index in range(group * QUESTIONS_PER_SCENE, group * QUESTIONS_PER_SCENE + count):
        for attempt in range(MAX_ATTEMPTS):
            sequence = derive_seed(seed, family_name, group, index, attempt + 1)
            on_shared = attempt < SHARED_SCENE_TRIES
            ctx = shared if on_shared else _render(_scene_id(sequence), duplicates)
            if ctx is None:
                continue
            question = family.make(ctx, np.random.default_rng(sequence), index)
            if question is None or (on_shared and _repeat_key(question) in asked):
                continue
            if on_shared:
                asked.add(_repeat_key(question))
            samples.append(_to_sample(family, index, question, ctx))
            break
        else:
            raise RuntimeError(
                f"no unambiguous {family_name} question #{index} in {MAX_ATTEMPTS} scenes (seed {seed})"
            )
    return samples


def _generate_job(job: tuple[int, str, int, int]) -> list[Sample]:
    """A worker's job: the group's samples with their JPEGs already encoded (in parallel, while the other
    worker generates), so the process writing the parquet files only copies them."""
    samples = generate_group(*job)
    for sample in samples:
        sample.image_urls()
    return samples


def _one_blas_thread() -> None:
    """Pool initializer: the workers already take a core each, and BLAS threads of their own (numpy's
    OpenBLAS spins while it waits for work) would only take CPU from the other worker."""
    threadpool_limits(1, user_api="blas")


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """The generation workers, each with one BLAS thread. Forked: they start at once and callers need no
    `if __name__ == "__main__"` guard; each opens its own pybullet client, so nothing live is shared."""
    return ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("fork"), initializer=_one_blas_thread
    )


def default_workers() -> int:
    """Two processes at most: generation is CPU-bound and the project targets a 2-core laptop."""
    return max(1, min(2, os.cpu_count() or 1))


def generate(
    n: int,
    seed: int = 0,
    families: Sequence[str] | None = None,
    workers: int | None = None,
    on_questions: Callable[[int], None] | None = None,
) -> dict[str, list[Sample]]:
    """`n` questions per family, in index order; `workers > 1` spreads scenes over processes.
    `on_questions(count)` hears of each scene's questions as they are done (a progress bar)."""
    if n < 1:
        raise ValueError(f"n must be a positive number of questions per family, got {n}")
    names = check_families(families)
    per = QUESTIONS_PER_SCENE
    jobs = [(seed, name, group, min(per, n - group * per)) for name in names for group in range(-(-n // per))]
    workers = default_workers() if workers is None else workers
    if workers <= 1 or len(jobs) == 1:
        groups = []
        for job in jobs:
            groups.append(generate_group(*job))
            if on_questions is not None:
                on_questions(len(groups[-1]))
    else:
        with worker_pool(workers) as pool:
            groups = []
            for group_samples in pool.map(_generate_job, jobs):  # in job order, each as it is done
                groups.append(group_samples)
                if on_questions is not None:
                    on_questions(len(group_samples))
    by_family: dict[str, list[Sample]] = {name: [] for name in names}
    for (_, name, _, _), group_samples in zip(jobs, groups, strict=True):
        by_family[name].extend(group_samples)
    return by_family


def prepare_output(out: str | Path) -> Path:
    """Create the output folder and check it is writable, with a clear error otherwise."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"cannot create output folder {folder}: {error.strerror or error}") from error
    if not os.access(folder, os.W_OK):
        raise ValueError(f"output folder {folder} is not writable")
    return folder


def export(
    out: str | Path, n: int, seed: int = 0, families: Sequence[str] | None = None, workers: int | None = None
) -> dict[str, Path]:
    """Generate and write `<out>/spatialsim_<family>.parquet` for each family; returns the files."""
    names = check_families(families)
    folder = prepare_output(out)
    return write_families(folder, generate(n, seed, names, workers))


def write_families(folder: str | Path, by_family: dict[str, list[Sample]]) -> dict[str, Path]:
    """Write each family's samples to `<folder>/spatialsim_<family>.parquet`; returns the files."""
    return {
        name: write_parquet(samples, Path(folder) / f"{FAMILIES[name].data_source}.parquet")
        for name, samples in by_family.items()
    }
