"""`spacetools data generate / show`: identical files for identical arguments, clear errors, a PNG."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from spacetools.bench.dataset import Sample, read_samples
from spacetools.bench.spatialsim.draw import render_sample
from spacetools.cli.data import app

runner = CliRunner()
FAMILIES = "blinkdepth,detect2d"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("set")
    result = runner.invoke(
        app,
        ["generate", "--out", str(out), "--n", "2", "--seed", "4", "--families", FAMILIES, "--workers", "1"],
    )
    assert result.exit_code == 0, result.output
    return out


def test_generate_writes_one_file_per_family(generated: Path) -> None:
    files = sorted(p.name for p in generated.glob("*.parquet"))
    assert files == ["spatialsim_blinkdepth.parquet", "spatialsim_detect2d.parquet"]
    samples = read_samples(generated, keys=["spatialsim_blinkdepth"])
    assert [s.extra_info["index"] for s in samples] == [0, 1]


@pytest.mark.slow
def test_same_arguments_give_identical_files(generated: Path, tmp_path: Path) -> None:
    # Two worker processes here against one in the fixture's run: the pool must not change the output.
    args = [
        "generate",
        "--out",
        str(tmp_path),
        "--n",
        "2",
        "--seed",
        "4",
        "--families",
        FAMILIES,
        "--workers",
        "2",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for path in generated.glob("*.parquet"):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


def test_show_writes_a_png(generated: Path, tmp_path: Path) -> None:
    target = tmp_path / "shown.png"
    result = runner.invoke(
        app, ["show", str(generated), "--index", "1", "--family", "detect2d", "--out", str(target)]
    )
    assert result.exit_code == 0, result.output
    with Image.open(target) as image:
        assert image.width >= 640 and image.height > 480  # the render plus a text header


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--n", "-3"], "positive"),
        (["--n", "1", "--families", "robospatial,teleport"], "teleport"),
        (["--n", "1", "--workers", "0"], "at least 1"),
    ],
)
def test_bad_generate_arguments_exit_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["generate", "--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert not list(tmp_path.glob("*.parquet"))


def test_unknown_family_lists_the_valid_ones(tmp_path: Path) -> None:
    result = runner.invoke(app, ["generate", "--out", str(tmp_path), "--n", "1", "--families", "teleport"])
    assert result.exit_code == 2
    assert "robospatial" in result.output and "bopgrasp" in result.output


def test_unwritable_output_folder_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    result = runner.invoke(app, ["generate", "--out", str(blocker / "sub"), "--n", "1"])
    assert result.exit_code == 2
    assert "cannot create output folder" in result.output


def test_show_bad_index_and_missing_folder(generated: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["show", str(generated), "--index", "99", "--family", "blinkdepth"])
    assert result.exit_code == 2 and "no sample with index 99" in result.output
    result = runner.invoke(app, ["show", str(tmp_path / "missing"), "--index", "0"])
    assert result.exit_code == 2 and "no such file" in result.output


def test_installed_command_reports_bad_n(tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("spacetools")
    done = subprocess.run(
        [str(command), "data", "generate", "--out", str(tmp_path), "--n", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--n" in done.stderr and "positive" in done.stderr


def _sample(data_source: str, ground_truth: str) -> Sample:
    question = "<image>\nWhere?"
    return Sample(
        data_source=data_source,
        prompt=[{"role": "user", "content": question}],
        images=[np.full((480, 640, 3), 128, dtype=np.uint8)],
        ground_truth=ground_truth,
        extra_info={"index": 0, "question": question},
    )


def test_show_magnifies_a_small_ground_truth_and_draws_it_again() -> None:
    grasp = (
        "Grasp center: [0.500, 0.500], Left finger base: [0.490, 0.500], Right finger base: [0.510, 0.500], "
        "Left finger tip: [0.490, 0.520], Right finger tip: [0.510, 0.520]"
    )
    page = render_sample(_sample("spatialsim_bopgrasp", grasp))
    assert page.width > 640 + 200  # the image and a magnified view beside it
    zoom = np.asarray(page)[-480:, 650:]
    assert (np.all(zoom == (0, 255, 0), axis=-1)).sum() > 100, "the gripper lines are drawn in the view"
    # An option letter draws nothing, and a large region needs no magnifying: the page is the image alone.
    assert render_sample(_sample("spatialsim_cvb3ddepth", "(A)")).width == 8 * 90
    region = "[(0.100, 0.100), (0.900, 0.100), (0.900, 0.900), (0.100, 0.900)]"
    assert render_sample(_sample("spatialsim_robospatial", region)).width == 8 * 90
