"""Simulated tools share their renders through a `RenderStore`: a scene is rendered once for all tools.

Two caches stand for two tool instances (two processes in a Toolshed): the second reads the first's
render instead of rendering, and gets the same observation. A released session takes its renders with it
unless another session still uses them; the store keeps within its bytes.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from tests.tools.conftest import RenderedScene

from spacetools.tools import simworld
from spacetools.tools.renderstore import RenderStore
from spacetools.tools.simworld import SceneCache, parse_spec, render_observation

SIZE = (160, 120)
ONE_RENDER = SIZE[0] * SIZE[1] * (3 + 4 + 4)  # RGB, float32 depth, int32 segmentation


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The scenes rendered (rather than read from the store) during a test, by spec."""
    rendered: list[str] = []
    render_view = simworld.render_view

    def counting(spec, camera):  # type: ignore[no-untyped-def]
        rendered.append(spec.model_dump_json())
        return render_view(spec, camera)

    monkeypatch.setattr(simworld, "render_view", counting)
    return rendered


def _renders_in(folder: Path) -> int:
    return len(list(folder.glob("*.npz")))


def test_a_second_instance_reads_the_render_instead_of_rendering(
    scenes: list[RenderedScene], tmp_path: Path, renders: list[str]
) -> None:
    first = SceneCache(2**30, RenderStore(2**30, tmp_path))
    second = SceneCache(2**30, RenderStore(2**30, tmp_path))
    seen = first.observe(scenes[0].spec_json, *SIZE, "a")
    shared = second.observe(scenes[0].spec_json, *SIZE, "a")
    assert len(renders) == 1 and _renders_in(tmp_path) == 1
    assert shared is not seen
    np.testing.assert_array_equal(shared.view.depth, seen.view.depth)
    np.testing.assert_array_equal(shared.view.segmentation, seen.view.segmentation)
    for ours, theirs in zip(shared.truths, seen.truths, strict=True):
        np.testing.assert_array_equal(ours.mask, theirs.mask)
        np.testing.assert_array_equal(ours.obb_corners_2d, theirs.obb_corners_2d)
    # The same as a render of its own: what a tool reads does not depend on who rendered.
    alone = render_observation(parse_spec(scenes[0].spec_json), *SIZE)
    np.testing.assert_array_equal(shared.view.depth, alone.view.depth)


def test_instances_asking_at_once_wait_for_one_render(
    scenes: list[RenderedScene], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered: list[str] = []
    render_view = simworld.render_view

    def slow(spec, camera):  # type: ignore[no-untyped-def]
        rendered.append(spec.model_dump_json())
        time.sleep(0.3)  # the other instance asks meanwhile
        return render_view(spec, camera)

    monkeypatch.setattr(simworld, "render_view", slow)
    caches = [SceneCache(2**30, RenderStore(2**30, tmp_path)) for _ in range(2)]
    start = threading.Barrier(2)

    def observe(cache: SceneCache) -> np.ndarray:
        start.wait()
        return cache.observe(scenes[0].spec_json, *SIZE, "a").view.depth

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(observe, caches)
    assert len(rendered) == 1
    np.testing.assert_array_equal(first, second)


def test_a_render_goes_with_the_last_session_that_used_it(
    scenes: list[RenderedScene], tmp_path: Path, renders: list[str]
) -> None:
    store = RenderStore(2**30, tmp_path)
    first, second = SceneCache(2**30, store), SceneCache(2**30, RenderStore(2**30, tmp_path))
    first.observe(scenes[0].spec_json, *SIZE, "a")
    first.observe(scenes[0].spec_json, *SIZE, "b")  # from memory, and marked for b in the store too
    first.observe(scenes[1].spec_json, *SIZE, "b")
    assert _renders_in(tmp_path) == 2
    first.release("a")
    assert _renders_in(tmp_path) == 2  # scene 0 is still b's
    second.observe(scenes[0].spec_json, *SIZE, "b")
    assert len(renders) == 2  # read, not rendered
    second.release("b")
    assert _renders_in(tmp_path) == 0 and not list(tmp_path.iterdir())


def test_the_store_keeps_within_its_bytes_least_recently_used_out(
    scenes: list[RenderedScene], tmp_path: Path, renders: list[str]
) -> None:
    caches = [SceneCache(2**30, RenderStore(int(2.5 * ONE_RENDER), tmp_path)) for _ in range(2)]
    for rendered in scenes[:3]:
        caches[0].observe(rendered.spec_json, *SIZE, "a")
        assert _renders_in(tmp_path) <= 2
    caches[1].observe(scenes[2].spec_json, *SIZE, "a")  # the newest is kept
    caches[1].observe(scenes[0].spec_json, *SIZE, "a")  # the oldest went: rendered again
    assert renders == [rendered.spec_json for rendered in scenes[:3]] + [scenes[0].spec_json]
    tiny = SceneCache(2**30, RenderStore(ONE_RENDER // 2, tmp_path / "tiny"))
    tiny.observe(scenes[0].spec_json, *SIZE, "a")
    assert not (tmp_path / "tiny").exists()  # too large to share: answered, not stored


def test_a_damaged_render_is_rendered_again(
    scenes: list[RenderedScene], tmp_path: Path, renders: list[str]
) -> None:
    store = RenderStore(2**30, tmp_path)
    SceneCache(2**30, store).observe(scenes[0].spec_json, *SIZE, "a")
    (render,) = tmp_path.glob("*.npz")
    render.write_bytes(b"not a render")
    observation = SceneCache(2**30, store).observe(scenes[0].spec_json, *SIZE, "a")
    assert len(renders) == 2 and observation.size == SIZE
