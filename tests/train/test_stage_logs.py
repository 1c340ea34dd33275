"""Each DIRL stage writes its log lines into `run.log` of its own folder and of the run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from spacetools.bench.runlog import LOG_FILE, run_log
from spacetools.train.config import DIRLConfig
from spacetools.train.dirl import DIRLRun


def test_a_stage_logs_into_its_folder_and_the_runs_and_a_rerun_says_it_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="spacetools")
    run = DIRLRun(DIRLConfig(), tmp_path)

    def work(folder: Path) -> None:
        logging.getLogger("spacetools.train.sft").info("step 1 of %s", folder.name)

    async def twice() -> None:
        with run_log(tmp_path):  # as `DIRLRun.run` does around every stage
            await run.stage("sft", work)
            await run.stage("sft", work)

    asyncio.run(twice())
    stage_log = (tmp_path / "sft" / LOG_FILE).read_text()
    assert "[sft] …" in stage_log and "step 1 of sft" in stage_log and "[sft] done in" in stage_log
    run_log_text = (tmp_path / LOG_FILE).read_text()
    assert run_log_text.count("step 1 of sft") == 1 and "[sft] done before, skipped" in run_log_text
    assert "skipped" not in stage_log  # the skipped rerun did not open the stage's log
