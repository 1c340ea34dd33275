"""DIRL, the whole recipe in one resumable run: data, teachers, SFT, GRPO, and an evaluation after each stage.

Stages run in order and each leaves a `DONE` marker in its folder; a rerun of the same command skips the
finished stages and continues the unfinished one from its checkpoint (SFT and GRPO resume exactly), so a
run killed with -9 anywhere ends with the same results as an unbroken one.

    data → constant-guess baseline → universal traces → base model → stage-1 GRPO (one pointing tool: the
    IRL teacher) → IRL traces → mix → SFT → eval(sft) → stage-2 GRPO (all tools) → eval(dirl) → eval(base)
    → table, plots

Each model is evaluated on the held-out set and, with `data.second_eval_seed`, on a second one; the
results table (`results.md`, :mod:`spacetools.train.results`) puts every headline beside the constant
guess, with the paired gain of stage 2 over SFT on the same questions.

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
from spacetools.bench.baseline import constant_guesses
from spacetools.bench.dataset import Sample, read_samples
from spacetools.bench.evaluate import EvalConfig, evaluate_async
from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.bench.spatialsim.generator import export
from spacetools.bench.summary import Summary
from spacetools.kit.loading import load_processor
from spacetools.rewards.benchmarks import SPATIALSIM_PREFIX
from spacetools.toolshed.shed import Toolshed
from spacetools.toolshed.toolsets import get_toolset
from spacetools.train.base_models import BASE_MODELS, get_base_model
from spacetools.train.checkpoint import METRICS_FILE
from spacetools.train.config import (
    DIRLConfig,
    GRPOConfig,
    GRPOSettings,
    SFTConfig,
    TracesConfig,
    record_config,
)
from spacetools.train.gains import reward_gain
from spacetools.train.grpo import train_grpo_async
from spacetools.train.limits import check_token_limits, check_turn_limits
from spacetools.train.monitor import StageMonitor
from spacetools.train.plots import plot_stage, read_metrics
from spacetools.train.results import write_results
from spacetools.train.sft import train_sft
from spacetools.train.tiny import build_tiny_vlm
from spacetools.train.traces import collect_traces_async, mix_traces

DONE = "DONE"
BASELINE_FILE = "constant_guess.json"
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
        with run_folder_lock(folder), run_log(folder):  # the lock first: it marks the folder as a run's
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
        await self.stage("baseline", self._baseline)
        await self.stage("traces_universal", self._universal_traces)
        if config.base_model == "tiny":
            await self.stage("base", self._tiny_base)
        check_token_limits(
            config,
            self.stage_dir("traces_universal") / "traces.jsonl",
            load_processor(self.base_model).tokenizer,
        )
        await self.stage("irl_teacher", self._irl_teacher)
        await self.stage("traces_irl", self._irl_traces)
        await self.stage("traces_mix", self._mix)
        await self.stage("sft", self._sft)
        # Each model is evaluated as soon as it exists, on every held-out set; the untrained base last.
        await self.stage("eval_sft", lambda folder: self._evaluate(self.stage_dir("sft") / "model", folder))
        if config.data.second_eval_seed is not None:
            await self.stage(
                "eval_sft_2",
                lambda folder: self._evaluate(
                    self.stage_dir("sft") / "model",
                    folder,
                    data=self.second_eval_data,
                    limit=self.second_eval_limit,
                ),
            )
        await self.stage("grpo", self._grpo)
        await self.stage("eval_dirl", lambda folder: self._evaluate(self.stage_dir("grpo") / "model", folder))
        if config.data.second_eval_seed is not None:
            await self.stage(
                "eval_dirl_2",
                lambda folder: self._evaluate(
                    self.stage_dir("grpo") / "model",
                    folder,
                    data=self.second_eval_data,
                    limit=self.second_eval_limit,
                ),
            )
        await self.stage(
            "eval_base",
            lambda folder: self._evaluate(self.base_model, folder, limit=config.ablation_eval_limit),
        )
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
                    lambda folder: self._evaluate(
                        self.stage_dir("grpo_no_irl") / "model", folder, limit=config.ablation_eval_limit
                    ),
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
        gain = reward_gain(read_metrics(self.stage_dir("grpo") / METRICS_FILE))
        write_results(self.out, self._held_out(folders), gain.model_dump() if gain is not None else None)
        return {
            name: Summary.load(self.stage_dir(folder) / "summary.json") for name, folder in folders.items()
        }

    def _held_out(self, folders: dict[str, str]) -> dict[str, dict[str, Any]]:
        """What the results table pairs, per held-out set: its evaluations, baseline and SFT/DIRL folders."""
        baseline = json.loads((self.stage_dir("baseline") / BASELINE_FILE).read_text(encoding="utf-8"))
        sets = {
            "eval": {
                "seed": self.config.data.eval_seed,
                "evaluations": {
                    EVALUATIONS[name]: self.stage_dir(folder) for name, folder in folders.items()
                },
                "sft": self.stage_dir("eval_sft"),
                "dirl": self.stage_dir("eval_dirl"),
            }
        }
        if self.config.data.second_eval_seed is not None:
            sets["eval_2"] = {
                "seed": self.config.data.second_eval_seed,
                "evaluations": {
                    EVALUATIONS[name]: self.stage_dir(f"{name}_2") for name in ("eval_sft", "eval_dirl")
                },
                "sft": self.stage_dir("eval_sft_2"),
                "dirl": self.stage_dir("eval_dirl_2"),
            }
        return {name: {**spec, "constant_guess": baseline[name]} for name, spec in sets.items()}

    def _evaluation_folder(self, name: str) -> str:
        return "eval_dirl" if name == "eval_no_irl" and self._no_irl_is_full() else name

    @property
    def second_eval_data(self) -> Path:
        return self.stage_dir("data") / "eval_2"

    @property
    def second_eval_limit(self) -> int | None:
        return self.config.second_eval_limit or self.config.eval_limit

    def _data(self, folder: Path, families: list[str] | None) -> None:
        data = self.config.data
        export(folder / "train", data.train_n, data.train_seed, families)
        export(folder / "eval", data.eval_n, data.eval_seed, families)
        if data.second_eval_seed is not None:
            export(folder / "eval_2", data.eval_n, data.second_eval_seed, families)

    def _baseline(self, folder: Path) -> None:
        """The constant-guess baseline of each held-out set, chosen on the training questions."""
        train = read_samples(self.train_data)
        # Each set's guess is scored on the questions its models are evaluated on.
        held_out = {"eval": (self.eval_data, self.config.eval_limit)}
        if self.config.data.second_eval_seed is not None:
            held_out["eval_2"] = (self.second_eval_data, self.second_eval_limit)
        guesses = {
            name: {
                key: guess.to_dict()
                for key, guess in constant_guesses(train, _first_of_each(read_samples(path), limit)).items()
            }
            for name, (path, limit) in held_out.items()
        }
        (folder / BASELINE_FILE).write_text(json.dumps(guesses, indent=2) + "\n", encoding="utf-8")

    async def _universal_traces(self, folder: Path) -> None:
        settings = self.config.stage_settings(self.config.universal_teacher)
        config = TracesConfig.model_validate(
            {"data": self.train_data, "out": folder / "traces.jsonl", **settings}
        )
        counts = await collect_traces_async(config)
        (folder / "counts.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")

    def _tiny_base(self, folder: Path) -> None:
        """The tiny base model, its tokenizer trained on the prompt and the universal teacher's traces."""
        specs = Toolshed(get_toolset("v1")).specs()
        prompt = build_system_prompt(specs, self.config.rollout.system_prompt)
        rows = (self.stage_dir("traces_universal") / "traces.jsonl").read_text(encoding="utf-8").splitlines()
        texts = [prompt] + [
            part if isinstance(part, str) else json.dumps(part)
            for row in rows
            for message in json.loads(row)["messages"]
            for part in [message.get("content")]
        ]
        tiny = self.config.tiny
        build_tiny_vlm(folder, texts, **tiny.model_dump(), seed=self.config.seed)

    async def _evaluate(
        self, model: Path, folder: Path, *, data: Path | None = None, limit: int | None = None
    ) -> None:
        from spacetools.agent.policies.hf import load_hf_policy

        # One generate call takes every episode in flight.
        policy = load_hf_policy(
            str(model), device=self.config.device, batch_size=self.config.rollout.concurrency
        )
        config = EvalConfig(
            data=data or self.eval_data,
            out=folder,
            limit=limit or self.config.eval_limit,
            policy="hf",
            tools=self.config.tools,
            report=True,
            # The prompt and limits the model was trained with (a different prompt is another task).
            rollout=self.config.rollout,
        )
        try:
            summary = await evaluate_async(policy, config=config, console=self.console)
        finally:
            await policy.aclose()  # stops its batching task before the event loop ends
        summary.save(folder / "summary.json")

    def _grpo_config(self, block: GRPOSettings, model: Path, out: Path, **extra: Any) -> GRPOConfig:
        settings = {**self.config.stage_settings(block), **extra}
        return GRPOConfig.model_validate({"model": model, "data": self.train_data, "out": out, **settings})

    @property
    def _irl_benches(self) -> list[str]:
        return [SPATIALSIM_PREFIX + family for family in self.config.irl_families]

    async def _irl_teacher(self, folder: Path) -> None:
        tools = {**self.config.stage_settings(self.config.irl)["tools"], "toolset": self.config.irl_toolset}
        config = self._grpo_config(
            self.config.irl, self.base_model, folder, tools=tools, benches=self._irl_benches
        )
        with self.monitor(config) as progress:
            await train_grpo_async(config, progress=progress)

    async def _irl_traces(self, folder: Path) -> None:
        # The IRL teacher answers the questions it was trained on, with the limits it was trained with.
        config = TracesConfig.model_validate(
            {
                "data": self.train_data,
                "out": folder / "traces.jsonl",
                "teacher": str(self.stage_dir("irl_teacher") / "model"),
                "teacher_options": {"device": self.config.device},
                "benches": self._irl_benches,
                "limit": self.config.irl_traces_limit,
                "tools": self.config.tools,
                "rollout": self.config.stage_rollout(self.config.irl),
            }
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
        settings = self.config.stage_settings(self.config.sft)
        data = self.stage_dir(traces) / "traces.jsonl"
        config = SFTConfig.model_validate({"model": self.base_model, "data": data, "out": folder, **settings})
        with self.monitor(config) as progress:
            train_sft(config, progress=progress)

    async def _grpo(self, folder: Path, start: str = "sft") -> None:
        config = self._grpo_config(self.config.grpo, self.stage_dir(start) / "model", folder)
        with self.monitor(config) as progress:
            await train_grpo_async(config, progress=progress)


def _first_of_each(samples: list[Sample], limit: int | None) -> list[Sample]:
    """The first `limit` samples of each benchmark, in file order (what an evaluation with `limit` scores)."""
    seen: dict[str, int] = {}
    kept = []
    for sample in samples:
        seen[sample.data_source] = seen.get(sample.data_source, 0) + 1
        if limit is None or seen[sample.data_source] <= limit:
            kept.append(sample)
    return kept


def run_dirl(config: DIRLConfig, out: Path, console: Console | None = None) -> dict[str, Summary]:
    """Run (or continue) DIRL into `out`; returns the evaluation summary after each stage."""
    # Held-out questions must not be the training questions, nor one held-out set the other.
    data = config.data
    seeds = [seed for seed in (data.train_seed, data.eval_seed, data.second_eval_seed) if seed is not None]
    if len(set(seeds)) < len(seeds):
        raise ValueError(
            "data.train_seed, data.eval_seed and data.second_eval_seed must differ (held-out questions)"
        )
    check_turn_limits(config)
    return asyncio.run(DIRLRun(config, out, console).run())
