"""DIRL, the whole recipe in one resumable run: data, teachers, SFT, GRPO, and an evaluation after each stage.

Stages run in order and each leaves a `DONE` marker in its folder; a rerun of the same command skips the
finished stages and continues the unfinished one from its checkpoint (SFT and GRPO resume exactly), so a
run killed with -9 anywhere ends with the same results as an unbroken one.

    data → constant-guess baseline → universal traces → base model → [format cold start: scripted
    single-tool traces, SFT] → stage-1 GRPO (one pointing tool: the IRL teacher) → eval(irl) → IRL traces → mix → SFT
    → eval(sft) → [families SFT beats the constant guess on, on the validation set] → stage-2 GRPO (all
    tools, its own prompt seed) → eval(dirl) → [placebo, further seeds, sampled evaluations] → eval(base)
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
import functools
import json
import logging
from pathlib import Path
from typing import Any

from rich.console import Console

from spacetools.agent.protocol import build_system_prompt
from spacetools.agent.rollout import RolloutConfig
from spacetools.bench.baseline import constant_guesses
from spacetools.bench.dataset import load_samples, read_samples
from spacetools.bench.evaluate import EvalConfig, evaluate_async
from spacetools.bench.runlock import run_folder_lock
from spacetools.bench.runlog import run_log
from spacetools.bench.spatialsim.generator import export
from spacetools.bench.summary import Summary
from spacetools.kit.loading import load_processor
from spacetools.rewards.benchmarks import SPATIALSIM_PREFIX
from spacetools.toolshed import ToolsConfig
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
from spacetools.train.plots import plot_stage, read_metrics
from spacetools.train.results import write_results
from spacetools.train.sft import train_sft
from spacetools.train.stage_two import families_beating_constant
from spacetools.train.stages import StagedRun
from spacetools.train.tiny import build_tiny_vlm
from spacetools.train.traces import collect_traces_async, mix_traces

BASELINE_FILE = "constant_guess.json"
FAMILIES_FILE = "families.json"
logger = logging.getLogger(__name__)
# The evaluations of a run, in the order of the paper's ablation table, with their column names.
EVALUATIONS = {
    "eval_base": "untrained",
    "eval_irl": "IRL teacher (stage 1)",
    "eval_sft": "SFT only",
    "eval_no_irl": "without stage 1",
    "eval_dirl": "full DIRL",
}


class DIRLRun(StagedRun):
    """One DIRL run folder; `run()` does what is left to do."""

    def __init__(self, config: DIRLConfig, out: Path, console: Console | None = None) -> None:
        """`console` (optional) shows progress bars within stages; each stage logs a line as it starts and
        ends (the `spacetools.train.dirl` logger), into `run.log` of the run and of the stage's folder."""
        super().__init__(out, console)
        self.config = config

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
        if config.cold_start is not None:
            await self.stage("traces_cold_start", self._cold_start_traces)
            await self.stage("sft_cold_start", lambda folder: self._sft(folder, "traces_cold_start"))
        await self.stage("irl_teacher", self._irl_teacher)
        await self.stage("eval_irl", self._evaluate_irl_teacher)
        await self.stage("traces_irl", self._irl_traces)
        await self.stage("traces_mix", self._mix)
        await self.stage("sft", self._sft)
        # Each model is evaluated as soon as it exists, on every held-out set; the untrained base last.
        await self.stage("eval_sft", lambda folder: self._evaluate(self.stage_dir("sft") / "model", folder))
        if config.data.second_eval_seed is not None:
            await self.stage("eval_sft_2", functools.partial(self._evaluate_second, "sft"))
        if config.grpo_families == "beats_constant":
            await self.stage(
                "eval_sft_validation",
                lambda folder: self._evaluate(
                    self.stage_dir("sft") / "model",
                    folder,
                    data=self.validation_data,
                    limit=config.validation_limit,
                ),
            )
            await self.stage("grpo_families", self._choose_grpo_families)
        await self.stage("grpo", self._grpo)
        await self.stage("eval_dirl", lambda folder: self._evaluate(self.stage_dir("grpo") / "model", folder))
        trained = ["irl_teacher", "sft", "grpo"] + (["sft_cold_start"] if config.cold_start else [])
        trained += await self._stage_two_controls()
        if config.data.second_eval_seed is not None:
            await self.stage("eval_dirl_2", functools.partial(self._evaluate_second, "grpo"))
        await self.stage(
            "eval_base",
            lambda folder: self._evaluate(self.base_model, folder, limit=config.ablation_eval_limit),
        )
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
        columns, pairs = self._control_evaluations()
        evaluations = {EVALUATIONS[name]: self.stage_dir(folder) for name, folder in folders.items()}
        sets: dict[str, dict[str, Any]] = {
            "eval": {
                "seed": self.config.data.eval_seed,
                "evaluations": {
                    **evaluations,
                    **{column: self.stage_dir(name) for column, name in columns.items()},
                },
                "sft": self.stage_dir("eval_sft"),
                "dirl": self.stage_dir("eval_dirl"),
                "pairs": {name: tuple(map(self.stage_dir, pair)) for name, pair in pairs.items()},
                "pooled": self._trained_benches(),
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

    def _control_evaluations(self) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
        """Stage 2's controls on the test set: their columns (name → evaluation folder) and the paired
        gains over SFT they add (name → the before and after folders)."""
        config = self.config
        columns: dict[str, str] = {}
        pairs: dict[str, tuple[str, str]] = {}
        if config.placebo:
            columns["placebo"] = "eval_placebo"
            pairs["placebo"] = ("eval_sft", "eval_placebo")
        for seed in config.grpo_seeds:
            columns[f"full DIRL, seed {seed}"] = f"eval_seed{seed}"
            pairs[f"seed {seed}"] = ("eval_sft", f"eval_seed{seed}")
        if config.sampled_eval:
            columns.update(
                {"SFT only, sampled": "eval_sft_sampled", "full DIRL, sampled": "eval_dirl_sampled"}
            )
            pairs["sampled"] = ("eval_sft_sampled", "eval_dirl_sampled")
        return columns, pairs

    def _evaluation_folder(self, name: str) -> str:
        return "eval_dirl" if name == "eval_no_irl" and self._no_irl_is_full() else name

    @property
    def second_eval_data(self) -> Path:
        return self.stage_dir("data") / "eval_2"

    @property
    def validation_data(self) -> Path:
        return self.stage_dir("data") / "validation"

    @property
    def second_eval_limit(self) -> int | None:
        return self.config.second_eval_limit or self.config.eval_limit

    def _data(self, folder: Path, families: list[str] | None) -> None:
        data = self.config.data
        export(folder / "train", data.train_n, data.train_seed, families)
        export(folder / "eval", data.eval_n, data.eval_seed, families)
        if data.second_eval_seed is not None:
            export(folder / "eval_2", data.eval_n, data.second_eval_seed, families)
        if data.validation_seed is not None:
            export(folder / "validation", data.eval_n, data.validation_seed, families)
        if data.grpo_seed is not None:
            export(folder / "grpo_train", data.train_n, data.grpo_seed, families)
        cold_start = self.config.cold_start
        if cold_start is not None:
            export(folder / "cold_start", cold_start.questions, cold_start.seed, self.config.irl_families)

    def _baseline(self, folder: Path) -> None:
        """The constant-guess baseline of each held-out set, chosen on the training questions."""
        train = read_samples(self.train_data)
        # Each set's guess is scored on the questions its models are evaluated on.
        held_out = {"eval": (self.eval_data, self.config.eval_limit)}
        if self.config.data.second_eval_seed is not None:
            held_out["eval_2"] = (self.second_eval_data, self.second_eval_limit)
        if self.config.data.validation_seed is not None:
            held_out["validation"] = (self.validation_data, self.config.validation_limit)
        guesses = {
            name: {
                key: guess.to_dict()
                for key, guess in constant_guesses(
                    train, list(load_samples(path, limit=limit).values())
                ).items()
            }
            for name, (path, limit) in held_out.items()
        }
        (folder / BASELINE_FILE).write_text(json.dumps(guesses, indent=2) + "\n", encoding="utf-8")

    async def _universal_traces(self, folder: Path) -> None:
        settings = self.config.resolved(self.config.universal_teacher)
        config = TracesConfig(**dict(settings), data=self.train_data, out=folder / "traces.jsonl")
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
        self,
        model: Path,
        folder: Path,
        *,
        data: Path | None = None,
        limit: int | None = None,
        temperature: float = 0.0,
        benches: list[str] | None = None,
        tools: ToolsConfig | None = None,
        rollout: RolloutConfig | None = None,
    ) -> None:
        """Evaluate `model` into `folder`: greedy, or sampled at `temperature` (seeded by the run's seed);
        by default on every family, with the recipe's tools and rollout."""
        from spacetools.agent.policies.hf import load_hf_policy

        # One generate call takes every episode in flight.
        policy = load_hf_policy(
            str(model),
            device=self.config.device,
            batch_size=self.config.rollout.concurrency,
            temperature=temperature,
        )
        config = EvalConfig(
            data=data or self.eval_data,
            out=folder,
            benches=benches,
            limit=limit or self.config.eval_limit,
            policy="hf",
            tools=tools or self.config.tools,
            report=True,
            # The prompt and limits the model was trained with (a different prompt is another task).
            # A sampled evaluation draws from the run's seed (with each task id and turn).
            rollout=(rollout or self.config.rollout).model_copy(update={"sampling_seed": self.config.seed}),
        )
        try:
            summary = await evaluate_async(policy, config=config, console=self.console)
        finally:
            await policy.aclose()  # stops its batching task before the event loop ends
        summary.save(folder / "summary.json")

    def _grpo_config(
        self, block: GRPOSettings, model: Path, out: Path, data: Path | None = None, **extra: Any
    ) -> GRPOConfig:
        """Stage 1's or 2's config: the block resolved over the recipe, `extra` settings on top."""
        settings = {**dict(self.config.resolved(block)), **extra}
        return GRPOConfig(**settings, model=model, data=data or self.train_data, out=out)

    def _irl_tools(self, tools: ToolsConfig) -> ToolsConfig:
        """`tools` with the IRL teacher's one tool set."""
        return ToolsConfig.model_validate({**dict(tools), "toolset": self.config.irl_toolset})

    @property
    def _irl_benches(self) -> list[str]:
        return [SPATIALSIM_PREFIX + family for family in self.config.irl_families]

    async def _irl_teacher(self, folder: Path) -> None:
        tools = self._irl_tools(self.config.resolved(self.config.irl).tools)
        start = self.stage_dir("sft_cold_start") / "model" if self.config.cold_start else self.base_model
        config = self._grpo_config(self.config.irl, start, folder, tools=tools, benches=self._irl_benches)
        with self.monitor(config) as progress:
            await train_grpo_async(config, progress=progress)

    async def _evaluate_irl_teacher(self, folder: Path) -> None:
        """The IRL teacher on the held-out questions of its families, with its tool set and limits."""
        irl, model = self.config.resolved(self.config.irl), self.stage_dir("irl_teacher") / "model"
        tools, rollout = self._irl_tools(irl.tools), self.config.stage_rollout(self.config.irl)
        await self._evaluate(model, folder, benches=self._irl_benches, tools=tools, rollout=rollout)

    async def _irl_traces(self, folder: Path) -> None:
        # The IRL teacher answers the questions it was trained on, with the limits it was trained with.
        config = TracesConfig(
            data=self.train_data,
            out=folder / "traces.jsonl",
            teacher=str(self.stage_dir("irl_teacher") / "model"),
            teacher_options={"device": self.config.device},
            benches=self._irl_benches,
            limit=self.config.irl_traces_limit,
            tools=self.config.tools,
            rollout=self.config.stage_rollout(self.config.irl),
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
        cold_start = self.config.cold_start
        block = (
            cold_start.sft if cold_start is not None and traces == "traces_cold_start" else self.config.sft
        )
        settings = dict(self.config.resolved(block))
        data = self.stage_dir(traces) / "traces.jsonl"
        config = SFTConfig(**settings, model=self.base_model, data=data, out=folder)
        with self.monitor(config) as progress:
            train_sft(config, progress=progress)

    async def _grpo(self, folder: Path, start: str = "sft", **extra: Any) -> None:
        """Stage 2 from the model of stage `start`, on its own prompts and the families chosen for it."""
        data = self.stage_dir("data") / "grpo_train" if self.config.data.grpo_seed is not None else None
        if self.config.grpo_families == "beats_constant":
            chosen = json.loads((self.stage_dir("grpo_families") / FAMILIES_FILE).read_text(encoding="utf-8"))
            extra["benches"] = chosen["trained"]
        config = self._grpo_config(self.config.grpo, self.stage_dir(start) / "model", folder, data, **extra)
        with self.monitor(config) as progress:
            await train_grpo_async(config, progress=progress)

    def _trained_benches(self) -> list[str]:
        """The benchmarks stage 2 trained (every evaluated one when its config named none)."""
        benches = json.loads((self.stage_dir("grpo") / "config.json").read_text(encoding="utf-8"))["benches"]
        return sorted(benches or Summary.load(self.stage_dir("eval_sft") / "summary.json").benchmarks)

    def _choose_grpo_families(self, folder: Path) -> None:
        """Stage 2's families: those whose SFT interval on the validation set is above the constant guess;
        every family, said in the log and the file, when none is."""
        guesses = json.loads((self.stage_dir("baseline") / BASELINE_FILE).read_text(encoding="utf-8"))
        summary = Summary.load(self.stage_dir("eval_sft_validation") / "summary.json")
        chosen = families_beating_constant(summary, guesses["validation"])
        chosen["trained"] = chosen["chosen"] or sorted(chosen["benchmarks"])
        if not chosen["chosen"]:
            logger.warning("[grpo_families] SFT beats the constant guess on no family: stage 2 trains all")
        self._note(f"[grpo_families] stage 2 trains {', '.join(chosen['trained'])}")
        (folder / FAMILIES_FILE).write_text(json.dumps(chosen, indent=2) + "\n", encoding="utf-8")

    async def _stage_two_controls(self) -> list[str]:
        """Stage 2's controls beside the full run, each its own run from the same SFT model and its own
        evaluation: the placebo, further training seeds and the sampled evaluations. Returns the stages trained."""
        config = self.config
        runs: dict[str, dict[str, Any]] = {"grpo_placebo": {"placebo": True}} if config.placebo else {}
        runs.update({f"grpo_seed{seed}": {"seed": seed} for seed in config.grpo_seeds})
        for name, extra in runs.items():
            await self.stage(name, functools.partial(self._grpo, **extra))
            await self.stage(
                "eval_" + name.removeprefix("grpo_"), functools.partial(self._evaluate_stage, name)
            )
        if config.sampled_eval:
            sampled = functools.partial(self._evaluate_stage, temperature=config.grpo.temperature)
            await self.stage("eval_sft_sampled", functools.partial(sampled, "sft"))
            await self.stage("eval_dirl_sampled", functools.partial(sampled, "grpo"))
        return list(runs)

    async def _evaluate_stage(self, stage: str, folder: Path, temperature: float = 0.0) -> None:
        await self._evaluate(self.stage_dir(stage) / "model", folder, temperature=temperature)

    async def _evaluate_second(self, stage: str, folder: Path) -> None:
        """The model of `stage` on the second held-out set."""
        model = self.stage_dir(stage) / "model"
        await self._evaluate(model, folder, data=self.second_eval_data, limit=self.second_eval_limit)

    async def _cold_start_traces(self, folder: Path) -> None:
        """The scripted teacher with the IRL tool set on the cold start's questions, with stage 1's limits."""
        assert self.config.cold_start is not None
        teacher = self.config.resolved(self.config.universal_teacher)
        settings = {
            **dict(teacher),
            "teacher": "scripted",
            "benches": self._irl_benches,
            "limit": None,  # every question of the cold start's own set
            "tools": self._irl_tools(teacher.tools),
            "rollout": self.config.stage_rollout(self.config.irl),
        }
        config = TracesConfig(
            **settings, data=self.stage_dir("data") / "cold_start", out=folder / "traces.jsonl"
        )
        counts = await collect_traces_async(config)
        (folder / "counts.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")


def run_dirl(config: DIRLConfig, out: Path, console: Console | None = None) -> dict[str, Summary]:
    """Run (or continue) DIRL into `out`; returns the evaluation summary after each stage."""
    # DIRLConfig has checked that no question seed serves two roles (training, validation, held out).
    check_turn_limits(config)
    return asyncio.run(DIRLRun(config, out, console).run())
