"""DIRL, the whole recipe in one resumable run: data, teachers, SFT, GRPO, and an evaluation after each stage.

Stages run in order and each leaves a `DONE` marker in its folder; a rerun of the same command skips the
finished stages and continues the unfinished one from its checkpoint (SFT and GRPO resume exactly), so a
run killed with -9 anywhere ends with the same results as an unbroken one.

    data → universal traces → base model → eval(base) → stage-1 GRPO (one pointing tool: the IRL
    teacher) → IRL traces → mix → SFT → eval(sft) → stage-2 GRPO (all tools) → eval(dirl) → table, plots

With `ablation: true` the run also trains DIRL without stage 1 (SFT on the universal teacher's traces
alone, then stage 2): the evaluations then cover the paper's miniature ablation (untrained, SFT only,
without the IRL teacher, full DIRL).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from spacetools.agent.protocol import build_system_prompt
from spacetools.agent.rollout import RolloutConfig
from spacetools.bench.evaluate import EVAL_CONCURRENCY, EvalConfig, evaluate_async
from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.bench.spatialsim.generator import export
from spacetools.bench.summary import Summary
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import get_toolset
from spacetools.train.base_models import BASE_MODELS, get_base_model
from spacetools.train.checkpoint import METRICS_FILE
from spacetools.train.config import DIRLConfig, GRPOConfig, SFTConfig, TracesConfig, record_config
from spacetools.train.gains import RewardGain, reward_gain
from spacetools.train.grpo import train_grpo_async
from spacetools.train.limits import check_turn_limits
from spacetools.train.monitor import StageMonitor
from spacetools.train.plots import plot_stage, read_metrics
from spacetools.train.sft import train_sft
from spacetools.train.tiny import build_tiny_vlm
from spacetools.train.traces import collect_traces_async, mix_traces

DONE = "DONE"
RESULTS_FILE = "results.json"
logger = logging.getLogger(__name__)
# The evaluations of a run, in the order of the paper's ablation table, with their column names.
EVALUATIONS = {
    "eval_base": "untrained",
    "eval_sft": "SFT only",
    "eval_no_irl": "without stage 1",
    "eval_dirl": "full DIRL",
}


class DIRLRun:
    """One DIRL run folder; `run()` does what is left to do."""

    def __init__(self, config: DIRLConfig, out: Path, console: Console | None = None) -> None:
        """`console` (optional) shows progress bars within stages; each stage logs a line as it starts and
        ends (the `spacetools.train.dirl` logger), into `run.log` of the run and of the stage's folder."""
        self.config = config
        self.out = out
        self.console = console

    def monitor(self, config: SFTConfig | GRPOConfig) -> StageMonitor:
        """The progress bar and live figures (the config's `report_to`) of the training stage in `config.out`."""
        stage = config.out.name
        return StageMonitor.reporting_to(
            config.report_to,
            stage,
            config.out,
            self.out / "tensorboard" / stage,
            self.console,
            config=json.loads(config.model_dump_json()),
        )

    def stage_dir(self, name: str) -> Path:
        return self.out / name

    async def stage(self, name: str, work: Callable[[Path], Any]) -> None:
        """Run `work(folder)` unless the stage finished before; mark it done after."""
        folder = self.stage_dir(name)
        if (folder / DONE).is_file():
            self._note(f"[{name}] done before, skipped")
            return
        with run_log(folder):
            self._note(f"[{name}] …")
            started = time.perf_counter()
            result = work(folder)
            if asyncio.iscoroutine(result):
                await result
            seconds = time.perf_counter() - started
            # Wall time of the stage's last (possibly resumed) run, for the per-stage report.
            (folder / DONE).write_text(json.dumps({"wall_s": round(seconds, 1)}) + "\n", encoding="utf-8")
            self._note(f"[{name}] done in {seconds:.0f} s")

    def _note(self, line: str) -> None:
        """A stage's line: the command's own progress on the console, and the run's logs."""
        logger.info(line)
        if self.console is not None:
            self.console.print(line, highlight=False, markup=False)

    # The data sets and paths every stage shares.
    @property
    def train_data(self) -> Path:
        return self.stage_dir("data") / "train"

    @property
    def eval_data(self) -> Path:
        return self.stage_dir("data") / "eval"

    @property
    def base_model(self) -> Path:
        name = self.config.base_model
        if name == "tiny":
            return self.stage_dir("base")
        # A known pretrained base by name (`spacetools models get`), converted on first use.
        return get_base_model(name) if name in BASE_MODELS else Path(name).expanduser()

    async def run(self) -> dict[str, Summary]:
        with run_folder_lock(self.out):  # one run per folder (each stage also holds its own)
            record_config(self.config, self.out, resume=True)
            with run_log(self.out):
                return await self._run()

    async def _run(self) -> dict[str, Summary]:
        config = self.config
        families = config.data.families
        await self.stage("data", lambda folder: self._data(folder, families))
        await self.stage("traces_universal", self._universal_traces)
        if config.base_model == "tiny":
            await self.stage("base", self._tiny_base)
        await self.stage("eval_base", lambda folder: self._evaluate(self.base_model, folder))
        await self.stage("irl_teacher", self._irl_teacher)
        await self.stage("traces_irl", self._irl_traces)
        await self.stage("traces_mix", self._mix)
        await self.stage("sft", self._sft)
        await self.stage("eval_sft", lambda folder: self._evaluate(self.stage_dir("sft") / "model", folder))
        await self.stage("grpo", self._grpo)
        await self.stage("eval_dirl", lambda folder: self._evaluate(self.stage_dir("grpo") / "model", folder))
        trained = ["irl_teacher", "sft", "grpo"]
        if config.ablation:
            await self.stage("traces_no_irl", self._mix_without_irl)
            if self._no_irl_is_full():
                logger.info("[ablation] the IRL teacher gave no trace: DIRL without stage 1 is the full run")
            else:
                await self.stage("sft_no_irl", lambda folder: self._sft(folder, "traces_no_irl"))
                await self.stage("grpo_no_irl", lambda folder: self._grpo(folder, "sft_no_irl"))
                await self.stage(
                    "eval_no_irl",
                    lambda folder: self._evaluate(self.stage_dir("grpo_no_irl") / "model", folder),
                )
                trained += ["sft_no_irl", "grpo_no_irl"]
        for stage in trained:
            metrics = self.stage_dir(stage) / METRICS_FILE
            plot_stage(metrics, self.out / f"{stage}.png", f"{stage} ({self.out.name})")
        folders = {
            name: self._evaluation_folder(name)
            for name in EVALUATIONS
            if name != "eval_no_irl" or config.ablation
        }
        summaries = {
            name: Summary.load(self.stage_dir(folder) / "summary.json") for name, folder in folders.items()
        }
        gain = reward_gain(read_metrics(self.stage_dir("grpo") / METRICS_FILE))
        write_results(self.out, summaries, folders, gain)
        return summaries

    def _evaluation_folder(self, name: str) -> str:
        return "eval_dirl" if name == "eval_no_irl" and self._no_irl_is_full() else name

    def _data(self, folder: Path, families: list[str] | None) -> None:
        data = self.config.data
        export(folder / "train", data.train_n, data.train_seed, families)
        export(folder / "eval", data.eval_n, data.eval_seed, families)

    def _traces_config(self, teacher: dict[str, Any], out: Path, **extra: Any) -> TracesConfig:
        return TracesConfig.model_validate(
            {
                "data": self.train_data,
                "out": out,
                "profile": self.config.profile,
                "seed": self.config.seed,
                "system_prompt": self.config.system_prompt,
                **teacher,
                **extra,
            }
        )

    async def _universal_traces(self, folder: Path) -> None:
        config = self._traces_config(self.config.universal_teacher, folder / "traces.jsonl")
        counts = await collect_traces_async(config)
        (folder / "counts.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")

    def _tiny_base(self, folder: Path) -> None:
        """The tiny base model, its tokenizer trained on the prompt and the universal teacher's traces."""
        specs = Toolshed(get_toolset("v1")).specs()
        prompt = build_system_prompt(specs, self.config.system_prompt)
        rows = (self.stage_dir("traces_universal") / "traces.jsonl").read_text(encoding="utf-8").splitlines()
        texts = [prompt] + [
            part if isinstance(part, str) else json.dumps(part)
            for row in rows
            for message in json.loads(row)["messages"]
            for part in [message.get("content")]
        ]
        tiny = self.config.tiny
        build_tiny_vlm(folder, texts, **tiny.model_dump(), seed=self.config.seed)

    async def _evaluate(self, model: Path, folder: Path) -> None:
        from spacetools.agent.policies.hf import load_hf_policy

        policy = load_hf_policy(
            str(model),
            device=self.config.device,
            max_new_tokens=self.config.eval_max_new_tokens,
        )
        config = EvalConfig(
            data=self.eval_data,
            out=folder,
            limit=self.config.eval_limit,
            policy="hf",
            profile=self.config.profile,
            seed=self.config.seed,
            report=True,
            # The prompt and limits the model was trained with (a different prompt is another task).
            rollout=RolloutConfig(
                system_prompt=self.config.system_prompt,
                max_turns=self.config.eval_max_turns,
                concurrency=EVAL_CONCURRENCY,
            ),
        )
        try:
            summary = await evaluate_async(policy, config=config, console=self.console)
        finally:
            await policy.aclose()  # stops its batching task before the event loop ends
        summary.save(folder / "summary.json")

    def _grpo_config(self, settings: dict[str, Any], model: Path, out: Path, **extra: Any) -> GRPOConfig:
        return GRPOConfig.model_validate(
            {
                "model": model,
                "data": self.train_data,
                "out": out,
                "profile": self.config.profile,
                "seed": self.config.seed,
                "device": self.config.device,
                "system_prompt": self.config.system_prompt,
                "report_to": self.config.report_to,
                **settings,
                **extra,
            }
        )

    @property
    def _irl_benches(self) -> list[str]:
        return [f"spatialsim_{family}" for family in self.config.irl_families]

    async def _irl_teacher(self, folder: Path) -> None:
        config = self._grpo_config(
            self.config.irl,
            self.base_model,
            folder,
            toolset=self.config.irl_toolset,
            benches=self._irl_benches,
        )
        with self.monitor(config) as progress:
            await train_grpo_async(config, progress=progress)

    async def _irl_traces(self, folder: Path) -> None:
        # The IRL teacher answers the questions it was trained on, with the limits it was trained with.
        irl = GRPOConfig.model_fields
        teacher = {
            "teacher": str(self.stage_dir("irl_teacher") / "model"),
            "teacher_options": {
                "device": self.config.device,
                "max_new_tokens": self.config.irl.get("max_new_tokens", irl["max_new_tokens"].default),
            },
        }
        config = self._traces_config(
            teacher,
            folder / "traces.jsonl",
            benches=self._irl_benches,
            max_turns=self.config.irl.get("max_turns", irl["max_turns"].default),
        )
        counts = await collect_traces_async(config)
        (folder / "counts.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")

    def _mix(self, folder: Path) -> None:
        sources = {
            self.stage_dir(f"traces_{name}") / "traces.jsonl": weight
            for name, weight in self.config.mix.items()
        }
        self._write_mix(sources, folder)

    def _mix_without_irl(self, folder: Path) -> None:
        self._write_mix({self.stage_dir("traces_universal") / "traces.jsonl": 1.0}, folder)

    def _write_mix(self, sources: dict[Path, float], folder: Path) -> None:
        thoughts = self.config.teacher_thoughts
        taken = mix_traces(sources, folder / "traces.jsonl", seed=self.config.seed, thoughts=thoughts)
        (folder / "taken.json").write_text(json.dumps(taken, indent=2) + "\n", encoding="utf-8")

    def _no_irl_is_full(self) -> bool:
        """Whether the mix without the IRL teacher holds the very rows of the full mix (no IRL trace kept)."""
        rows = [
            sorted((self.stage_dir(name) / "traces.jsonl").read_text(encoding="utf-8").splitlines())
            for name in ("traces_mix", "traces_no_irl")
        ]
        return rows[0] == rows[1]

    def _sft(self, folder: Path, traces: str = "traces_mix") -> None:
        settings = {
            "seed": self.config.seed,
            "device": self.config.device,
            "report_to": self.config.report_to,
            **self.config.sft,
        }
        config = SFTConfig.model_validate(
            {
                "model": self.base_model,
                "data": self.stage_dir(traces) / "traces.jsonl",
                "out": folder,
                **settings,
            }
        )
        with self.monitor(config) as progress:
            train_sft(config, progress=progress)

    async def _grpo(self, folder: Path, start: str = "sft") -> None:
        config = self._grpo_config(self.config.grpo, self.stage_dir(start) / "model", folder)
        with self.monitor(config) as progress:
            await train_grpo_async(config, progress=progress)


def valid_turn_rate(summary: Summary) -> float:
    """The share of the model's turns in an evaluation that parsed as tool calls or an answer."""
    turns = sum(bench.turns_mean * bench.n for bench in summary.benchmarks.values())
    invalid = sum(bench.invalid_turns for bench in summary.benchmarks.values())
    return 1.0 - invalid / turns if turns else 0.0


def mean_headline(summary: Summary) -> float:
    """The mean of the benchmarks' headline scores (the paper's ablation averages its benchmarks)."""
    scores = [bench.metrics.get("headline", 0.0) for bench in summary.benchmarks.values()]
    return sum(scores) / len(scores) if scores else 0.0


def write_results(
    out: Path, summaries: dict[str, Summary], folders: dict[str, str], gain: RewardGain | None
) -> None:
    """`results.json`: per evaluation (and the stage folder it read) the mean headline and valid-turn rate,
    and stage 2's reward gain."""
    results = {
        "evaluations": {
            EVALUATIONS[name]: {
                "stage": folders[name],
                "mean_headline": mean_headline(summary),
                "valid_turn_rate": valid_turn_rate(summary),
                "headline": {
                    key: bench.metrics.get("headline", 0.0) for key, bench in summary.benchmarks.items()
                },
            }
            for name, summary in summaries.items()
        },
        "stage2_reward_gain": gain.model_dump() if gain is not None else None,
    }
    (out / RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def run_dirl(config: DIRLConfig, out: Path, console: Console | None = None) -> dict[str, Summary]:
    """Run (or continue) DIRL into `out`; returns the evaluation summary after each stage."""
    # Held-out questions must not be the training questions.
    if config.data.train_seed == config.data.eval_seed:
        raise ValueError("data.train_seed and data.eval_seed must differ (held-out questions)")
    check_turn_limits(config)
    return asyncio.run(DIRLRun(config, out, console).run())
