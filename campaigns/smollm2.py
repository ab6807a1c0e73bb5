"""The SmolLM2 CPU campaign (the library of `python -m experiments.smollm2_cpu`): which drafters and
configurations it records, where each file goes, and the stages that record them
(`stage_latency`, `stage_tokens`, `stage_chains`, `stage_steps`; `stage_profile`, which fits them, is
`campaigns.smollm2_profile`; the stages that need the sweep and the report live in the command line).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import methods
from common.errors import InputError
from methods.spec import drafter_fixed, engine_config, priced_config
from methods import MethodConfig
from profiles.parts import Drafter, typed_drafters
from traces.record import teacher_forced_methods
from traces.drafter_timing import write_drafter_latency
from traces.timer import Timer
from runtime.prompts import parse_prompt_mix, load_prompt_mix
from campaigns.measure import Bench, Candidate
from traces import schema
from common.rundir import git_commit

STAGES = ("latency", "tokens", "chains", "steps", "profile", "best", "tables")
DATASETS = {"mt-bench": "mtbench", "humaneval": "humaneval", "code-edit": "codeedit",   # profile name -> prompt set
            "lib-edit": "libedit"}
VANILLA_VOCAB = 8192          # the draft vocabulary the bundled vanilla drafter was trained with
TARGET_ARCH = "smollm2-135m"
# drafter name in the Profile -> Profile drafter spec, with its trained file under --drafters: the
# trained draft model (kind draft_model), then each method's own trained drafters (`spec.drafters`)
DRAFTERS: dict[str, Drafter] = typed_drafters({
    "vanilla": {"kind": "draft_model", "model": "vanilla-1l", "file": "vanilla/vanilla.safetensors",
                "draft_vocab": VANILLA_VOCAB},
    **{name: entry for spec in methods.specs() for name, entry in spec.drafters(TARGET_ARCH).items()
       if "file" in entry or "model" not in entry},
})
ROUTERS = [f"{e.router.groups}:{e.router.top_n}" for e in DRAFTERS.values() if e.router]
# the prompts the TokenTraces record (the drafters' acceptance and prompt lookup's replayed steps are
# fitted on them; `--token-prompts`): the first 12 of each set, then 36 more spread over the prompts
# no bundled fidelity run measured (examples/smollm2_fidelity*, examples/transformers_peer), the
# HumanEval and code-edit ones on distinct HumanEval tasks, and 10 such prompts per set left unseen
# for held-out runs (examples/smollm2_fidelity_calib48); libedit (added later, its prompts in an order
# that mixes the library's modules) the first 48, leaving 49-99 unseen
TOKEN_PROMPTS = "libedit:1-48," + ",".join(f"{name}:1-12," + ",".join(f"{name}:{i}-{i}" for i in extra) for name, extra in (
    ("mtbench", (14, 16, 17, 18, 20, 21, 23, 24, 26, 27, 28, 30, 31, 33, 34, 35, 37, 39, 52, 53, 54, 57, 58, 59, 60, 63,
                 64, 65, 66, 67, 70, 71, 72, 73, 75, 77)),
    ("humaneval", (14, 17, 22, 24, 28, 30, 34, 37, 52, 56, 59, 61, 64, 69, 72, 74, 78, 81, 83, 87, 91, 94, 96, 99, 102,
                   106, 108, 113, 127, 131, 133, 137, 141, 143, 147, 149)),
    ("codeedit", (14, 17, 21, 23, 27, 29, 33, 36, 39, 54, 58, 61, 64, 68, 70, 72, 77, 81, 83, 86, 89, 92, 94, 98, 102,
                  105, 107, 112, 126, 129, 132, 136, 139, 142, 147, 149))))
# the forward micro-benchmark grid: every token count up to 12 (this CPU's kernels are not smooth
# in it: 2 and 3 tokens cost more than 4), then a coarser tail
LATENCY_TOKENS = "1,2,3,4,5,6,7,8,9,10,11,12,16,24,32,48,64,128,256"
LATENCY_CTX = "0,256,1024,4096"


@dataclass(frozen=True)
class Run:
    """One recorded configuration: what the engine ran (`config`, whose label names the run) on a
    Profile drafter (None: the method has none)."""

    config: MethodConfig
    drafter: str | None = None
    prefix: str = ""            # "best " for the sweep's choices (stage best)

    @property
    def method(self) -> str:
        return self.config.method

    @property
    def label(self) -> str:
        return self.prefix + self.config.label

    @property
    def priced(self) -> MethodConfig:
        """The configuration the Profile prices (a trained router is part of its drafter)."""
        return priced_config(self.config, DRAFTERS[self.drafter]) if self.drafter else self.config


def drafters_of(spec) -> list[str | None]:
    """The SmolLM2 drafters a method runs on ([None]: it runs without one)."""
    if not spec.drafter_kinds:
        return [None]
    return [name for name, d in DRAFTERS.items() if d.kind in spec.drafter_kinds]


def _on(config: MethodConfig, drafter: str | None) -> Run:
    """`config` as the engine runs it on `drafter` (a trained router's settings are the drafter's)."""
    return Run(engine_config(config, DRAFTERS[drafter]) if drafter else config, drafter)


PLAIN_RUN = Run(methods.get(methods.BASELINE).config())
# the StepTraces the engine calibration is fitted on, for every dataset: every method's
# calibration configurations (two sizes or more: each step part's scale and fixed cost can be told
# apart) on every drafter it runs on
RUNS: list[Run] = [_on(config, d) for spec in methods.specs() for d in drafters_of(spec)
                   for config in spec.calibration_configs()]
# per drafter, the default configuration of the first method that runs on it: like-with-like
# chains (GLIDE Table 1's shape), and the chain acceptance of drafters without a TokenTrace
CHAIN_RUNS = {d: _on(spec.config(), d) for spec in reversed(methods.specs()) if spec.drafter_kinds
              for d in drafters_of(spec)}
# teacher-forced TokenTraces: drafter -> the configuration whose decoder scores a sequence with it
TOKEN_DRAFTERS = {d: methods.get(m).config() for m in reversed(teacher_forced_methods())
                  for d in drafters_of(methods.get(m))}
# the drafters no decoder scores in one pass (GLIDE's cross-attention, CORAL's features): greedy
# chains of one draft, decoded for real on the TokenTraces' prompts (untimed: acceptance does not
# depend on the clock), give their first draft's acceptance in chains of one, the configuration
# the sweep picks for them; deeper positions come from CHAIN_RUNS' timed chains (two prompts)
ACCEPTANCE_CHAINS = {d: Run(run.config.replace(gamma=1), d) for d, run in CHAIN_RUNS.items()
                     if d not in TOKEN_DRAFTERS}


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-")


def drafter_file(args, name: str) -> str:
    path = args.drafters / DRAFTERS[name].file
    if not path.is_file():
        raise InputError(f"trained drafter '{name}' not found at {path}: run python -m training "
                         f"{DRAFTERS[name].file.split('/')[0]}")
    return str(path)


def run_module(module: str, argv: list[str], log) -> None:
    """One project CLI in a fresh process (its own torch threads and memory); its failure is ours."""
    log(f"$ python -m {module} {' '.join(argv)}")
    done = subprocess.run([sys.executable, "-m", module, *argv])
    if done.returncode != 0:
        raise InputError(f"python -m {module} exited with {done.returncode}")


# ------------------------------------------------------------------------------------ recording

def stage_latency(args, log) -> None:
    out = args.out / "latency.parquet"
    if not out.exists():
        run_module("traces.timing", ["--model", "smollm2", "--drafter", drafter_file(args, "vanilla"), "--drafter", "layers:1",
                                      *(a for r in ROUTERS for a in ("--router", r)), "--tokens", LATENCY_TOKENS, "--ctx", LATENCY_CTX,
                                      "--threads", str(args.threads), "--out", str(out), "--quiet"], log)
    out = args.out / "drafter_latency.parquet"
    if out.exists():
        return
    import torch

    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    frame = write_drafter_latency(out, (TARGET_ARCH,), (0, 512, 1024), Timer(device, 1, 5, 3, 2.0), device, torch.float32)
    log(f"wrote {len(frame)} drafter latency rows to {out}")


def record_untimed(args, config: MethodConfig, drafter: str | None, out: Path, log, prompts: str,
            teacher_forced: bool = False) -> None:
    """One untimed `traces.record` run of `config` on `prompts` (a prompt spec)."""
    argv = ["--target", "smollm2", "--method", config.method, "--config", json.dumps(config.to_dict()),
            "--prompts", prompts, "--max-new-tokens", str(args.max_new_tokens), "--threads", str(args.threads),
            "--out", str(out), "--quiet"]
    if drafter is not None:
        argv += ["--drafter", drafter_file(args, drafter)]
    run_module("traces.record", argv + (["--teacher-forced"] if teacher_forced else []), log)


def token_path(args, drafter: str, dataset: str) -> Path:
    return args.out / f"tokens_{drafter}_{dataset}.parquet"


def chain_path(args, label: str, dataset: str) -> Path:
    return args.out / f"chains_{slug(label)}_{dataset}.parquet"


def step_path(args, label: str, dataset: str) -> Path:
    return args.out / f"steps_{slug(label)}_{dataset}.parquet"


def best_partners_path(args, dataset: str) -> Path:
    """Plain decoding measured beside the recorded best (stage best): their partners, kept apart from
    the ar trace the engine calibration is fitted on (other prompts)."""
    return args.out / f"steps_best-partners_{dataset}.parquet"


def stage_tokens(args, log) -> None:
    for drafter, config in TOKEN_DRAFTERS.items():
        for dataset in DATASETS:
            record_untimed(args, config, drafter, token_path(args, drafter, dataset), log, token_prompts(args)[dataset],
                    teacher_forced=True)


def stage_chains(args, log) -> None:
    for drafter, run in ACCEPTANCE_CHAINS.items():
        for dataset in DATASETS:
            record_untimed(args, run.config, drafter, chain_path(args, run.label, dataset), log, token_prompts(args)[dataset])


def token_prompts(args) -> dict[str, str]:
    """Profile dataset -> the prompt spec its TokenTraces record (`--token-prompts`, split by set)."""
    parts: dict[str, list[str]] = {}
    for name, lo, hi in parse_prompt_mix(getattr(args, "token_prompts", None) or TOKEN_PROMPTS):
        if name not in DATASETS.values():
            raise InputError(f"--token-prompts: '{name}' is not one of the campaign's prompt sets "
                             f"({', '.join(DATASETS.values())})")
        parts.setdefault(name, []).append(name if hi is None else f"{name}:{lo}-{hi}")
    missing = [name for name in DATASETS.values() if name not in parts]
    if missing:
        raise InputError(f"--token-prompts names no prompt of {', '.join(missing)}: every dataset needs its TokenTraces")
    return {dataset: ",".join(parts[name]) for dataset, name in DATASETS.items()}


def token_prompt_count(args) -> str:
    """How many prompts per dataset the TokenTraces record ("48", or "12-48" when the sets differ)."""
    counts = sorted({len(load_prompt_mix(spec)) for spec in token_prompts(args).values()})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def calibration_prompts(args, datasets=DATASETS) -> str:
    """The prompts the step calibration runs on: the first --step-limit of each dataset."""
    return ",".join(f"{DATASETS[d]}:{args.step_limit}" for d in datasets)


def stage_steps(args, log) -> None:
    """Greedy StepTraces of RUNS on the calibration prompts (`measure_beside_plain`), dataset by
    dataset. Only the configurations without a trace are recorded; the plain partners join the ar
    trace, so the drift normalisation (traces.drift) puts old and new recordings on one scale."""
    for dataset in DATASETS:
        todo = [run for run in RUNS if not step_path(args, run.label, dataset).exists()]
        if not todo:
            continue
        measured = measure_beside_plain(args, todo, calibration_prompts(args, [dataset]), log)
        for (run, _), rows in measured.items():
            write_steps(args, run, dataset, rows)
        log(f"wrote {len(measured)} step traces of {dataset} to {args.out}")


def measure_beside_plain(args, todo: list[Run], prompt_spec: str, log) -> dict[tuple[Run, str], pd.DataFrame]:
    """(run, Profile dataset) -> StepTrace rows of `todo` and of plain decoding (PLAIN_RUN, added)
    on `prompt_spec`, measured in one process with the interleaved repeats of
    campaigns.measure (the way experiments.fidelity measures), every generation beside
    plain decoding of its prompt: a pair, whose id continues after the recorded ones."""
    runs = [PLAIN_RUN] + [run for run in todo if run != PLAIN_RUN]    # the partner of every generation
    bench = Bench("smollm2", DRAFTERS, args.drafters, args.threads)
    prompts = bench.encode(load_prompt_mix(prompt_spec))
    cands = [Candidate(run.config, run.drafter) for run in runs]
    _runs, steps = bench.measure(cands, prompts, repeats=args.repeats, max_new_tokens=args.max_new_tokens, log=log,
                                 first_pair=next_pair(args))
    dataset_of = {name: profile_name for profile_name, name in DATASETS.items()}
    return {(run, dataset_of[prompt_set]): rows.drop(columns=["candidate", "dataset"])
            for run, cand in zip(runs, cands)
            for prompt_set, rows in steps[steps["candidate"] == cand.label].groupby("dataset", sort=False)}


def next_pair(args) -> int:
    """The first pair id after every pair the recorded StepTraces hold (0: none recorded)."""
    frames = [schema.read_trace(path, "step")[0] for path in sorted(args.out.glob("steps_*.parquet"))]
    ids = [int(f["pair"].max()) for f in frames if "pair" in f and len(f)]
    return max(ids, default=-1) + 1


def write_steps(args, run: Run, dataset: str, rows: pd.DataFrame, path: Path | None = None) -> None:
    """Write `run`'s StepTrace of `dataset` (to `path`, default its step_path); plain decoding's
    rows are added to the ones recorded."""
    path = path or step_path(args, run.label, dataset)
    if run == PLAIN_RUN and path.exists():
        rows = pd.concat([schema.read_trace(path, "step")[0], rows], ignore_index=True)
    meta = schema.RunMetadata(kind="step", models={"target": "smollm2", **({"drafter": run.drafter} if run.drafter else {})},
                              hardware="CPU", dtype="fp32", temperature=0.0, dataset=dataset, seed=0,
                              commit=git_commit(), extra={"label": run.label, "threads": args.threads,
                                                          "repeats": args.repeats, "measured_by": "campaigns.measure"})
    schema.write_trace(path, rows, meta)


def best_run(row: pd.DataFrame) -> Run:
    """A scored sweep row (a one-row frame of sweep.scoring columns) as the run that records
    it: its configuration on its drafter, which adds the settings it fixes (a trained router)."""
    config = methods.get(str(row["method"].iloc[0])).configs_of(row)[0]
    drafter = row["drafter"].iloc[0] if "drafter" in row else None
    drafter = None if drafter in (None, "-") else str(drafter)
    defaults = type(config)()
    untrained = [k for spec in DRAFTERS.values() for k in drafter_fixed(spec)
                 if getattr(config, k, None) != getattr(defaults, k, None)]
    if untrained:
        raise InputError(f"{config.label}: its '{untrained[0]}' needs a trained drafter's own (an untrained "
                         "router); it cannot be recorded")
    return Run(engine_config(config, DRAFTERS[drafter]) if drafter else config, drafter, "best ")


def best_runs_path(args) -> Path:
    return args.out / "best_runs.json"


def best_runs(args) -> dict[str, list[Run]]:
    """dataset -> the runs stage `best` chose (best_runs.json: label, method, the engine's config,
    drafter and the sweep's configuration label)."""
    path = best_runs_path(args)
    chosen = json.loads(path.read_text()) if path.is_file() else {}
    return {dataset: [Run(methods.parse_config(r["method"], r["config"]), r["drafter"], "best ") for r in runs]
            for dataset, runs in chosen.items()}
