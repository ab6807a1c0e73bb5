"""The SmolLM2 CPU campaign in batches (the library of `python -m experiments.smollm2_batch`): what the
continuous-batching engine (`runtime.engine.batch`) costs on this CPU at batch 1-32, recorded and
calibrated into a Profile whose step price follows the batch, each row's tree and context as that
engine runs them (`batching` "padded": `costmodel.step.PADDED`).

The base campaign (`campaigns.smollm2`) priced batches from forwards timed at batch 1 and 2 and
never ran one; here, on one pinned core and one thread:
1. `latency`: `traces.timing --cache batch` (the batch engine's own cache and masks) of the target
   over every verify width the recorded configurations run, the contexts of the lib-edit prompts and
   the recorded batches and every batch to `DENSE_TO` (`latency_batches`); the trained vanilla drafter's
   forwards over its tree widths; GLIDE's decode-step draft forward (`traces.drafter_timing`, in the engine's
   caches) -> `latency.parquet`, `drafter_latency.parquet`;
2. `steps`: BatchStepTraces of the batched methods (`RUNS`) on calibration prompts (`--prompts`, lib-edit
   prompts the TokenTraces of the base campaign already use), every configuration decoding them at
   each batch beside plain decoding of the same prompts at the same batch (`campaigns.measure`);
3. `chains`: untimed greedy chains (`traces.record`) of the batched drafters at the draft lengths their
   acceptance would otherwise borrow from a longer chain (`lacking_chains`), on each dataset's
   calibration prompts (the base campaign's TokenTrace prompts) -> `chains_<configuration>_<dataset>.parquet`;
4. `profile`: latency tables from 1., the engine terms fitted from 2. (`calibrate.batch_engine`,
   per-row host work and per-request prefill included), the acceptance entries, drafters and workload
   carried from the base Profile (`--base-profile`: the same drafters and data; a chain length its
   entry never recorded, measured in 2.'s own chains or 3.'s: `with_recorded_chains`), this machine
   (`profiles.machine.this_machine`) -> `--profile`.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import methods
from calibrate.batch_engine import batch_steps, fit_batch_engine
from calibrate.engine import StepRun
from calibrate.fit_acceptance import with_chains
from calibrate.latency import fit_latency
from campaigns.measure import Bench, Candidate
from campaigns.smollm2 import (DATASETS, DRAFTERS, TARGET_ARCH, drafter_file, drafters_of, record_untimed, run_module,
                               slug, token_prompts)
from common.errors import InputError
from common.rundir import git_commit
from profiles.machine import this_machine
from profiles.parts import EngineTerms
from profiles.profile import Profile
from runtime.prompts import load_prompt_mix, parse_prompt_mix
from traces import schema
from traces.drafter_timing import drafter_entries, write_drafter_latency
from traces.schema import read_trace, timed_on
from traces.timer import Timer
from traces.timing import int_list

STAGES = ("latency", "steps", "chains", "profile")
BATCHES = "1,2,4,8,16,32"
PROMPTS = "libedit:1-32"          # calibration prompts (the base campaign's TokenTraces hold libedit 1-48)
MIN_PROMPTS = 8                   # a batch of B decodes max(B, MIN_PROMPTS) of them
# every verify width the recorded configurations run (1 to 9 tokens per row) and a little past it
TARGET_TOKENS = "1,2,3,4,5,6,7,8,9,10,12"
DRAFT_TOKENS = "1,2,4,8"          # the vanilla drafter's chains (1) and tree levels (2-8 per row)
CONTEXTS = "128,256,384,512"      # lib-edit prompts hold 136-459 tokens, the longest row of a batch up to ~500
# the latency grid times every batch up to this one: below ~8 rows a forward's cost on this CPU is not monotone in
# its rows (width 1, context 256: 0.136 s at batch 3, 0.112 s at 4, 0.100 s at 5), and a served load's steps visit
# every batch; batch 3, 5, 6 and 7 read off 1, 2, 4 and 8 of the same session missed by 14% median, 36% worst
DENSE_TO = 8
# the calibration configurations: plain decoding, then each batched method's own (`MethodSpec.batch_calibration`:
# two sizes where it has them, so that a part's scale and its fixed and per-row costs can be told apart) on
# its Profile drafter
RUNS = [Candidate(methods.get(methods.BASELINE).config(), None)] + [
    Candidate(spec.config.from_label(label), drafter) for spec in methods.specs() if spec.batch_calibration
    for drafter in drafters_of(spec) for label in spec.batch_calibration]
# the drafters the batch engine runs (CORAL and Kangaroo do not batch), by how their forwards are timed: a
# draft model alone (`traces.timing --drafter`, one file each), a feature drafter in the target's caches
# (`traces.drafter_timing`, one file for all)
BATCHED_DRAFTERS = tuple(dict.fromkeys(c.drafter for c in RUNS if c.drafter))
DRAFT_MODELS = tuple(d for d in BATCHED_DRAFTERS if DRAFTERS[d].kind == "draft_model")
FEATURE_DRAFTERS = tuple(d for d in BATCHED_DRAFTERS if d not in DRAFT_MODELS)
FEATURE_LATENCY = "drafter_latency.parquet"
# the Profile drafter entries of the batched methods that run without a drafter and hold their own acceptance
OWN_ENTRIES = tuple(name for spec in methods.specs() if spec.batch_calibration and not spec.drafter_kinds
                    for name in spec.drafters(TARGET_ARCH))


def selected_runs(labels: str) -> list[Candidate]:
    """The RUNS a `--runs` value names ("all", or labels such as "prompt_lookup g5 nmin2 nmax3",
    "sd g1 @vanilla", comma-separated), plain decoding always first: a campaign on a machine without
    the trained drafters records what it can run."""
    if labels.strip() == "all":
        return list(RUNS)
    by_label = {cand.label: cand for cand in RUNS}
    asked = [label.strip() for label in labels.split(",") if label.strip()]
    unknown = [label for label in asked if label not in by_label]
    if unknown or not asked:
        raise InputError(f"--runs: '{unknown[0] if unknown else labels}' is none of the campaign's configurations "
                         f"({', '.join(by_label)})")
    return [RUNS[0], *(by_label[label] for label in dict.fromkeys(asked) if label != RUNS[0].label)]


def drafters_used(args) -> set[str]:
    return {cand.drafter for cand in selected_runs(args.runs) if cand.drafter}


def step_path(args, cand: Candidate) -> Path:
    return args.out / f"steps_{slug(cand.label)}.parquet"


def chain_path(args, cand: Candidate, dataset: str) -> Path:
    return args.out / f"chains_{slug(cand.label)}_{dataset}.parquet"


def own_dataset(args, base) -> str:
    """The base Profile's name of the one prompt set `--prompts` draws from ('libedit' -> 'lib-edit')."""
    sets = {name for name, _, _ in parse_prompt_mix(args.prompts)}
    dataset = base.dataset_named(sets.pop()) if len(sets) == 1 else None
    if dataset is None:
        raise InputError(f"--prompts {args.prompts}: one prompt set of the base Profile's datasets "
                         f"({', '.join(base.datasets())}), please")
    return dataset


def lacking_chains(args, base) -> list[tuple[Candidate, str]]:
    """(configuration, dataset) of every chain the carried acceptance lacks: per batched drafter and
    dataset, each draft length below the longest its entry records that neither the entry nor this
    campaign's own runs (on their one dataset) hold. A prediction at such a length reads the next
    longer chain (`AcceptanceModel.beta`); the base campaign timed those on two prompts per dataset,
    which put GLIDE's tokens per step at g2 on HumanEval 11% under what batch 32 measured."""
    runs = [cand for cand in selected_runs(args.runs) if cand.drafter]
    own = own_dataset(args, base)
    acceptance, _, _ = carried(base, drafters_used(args))
    out = []
    for entry in acceptance.values():
        mine = [cand for cand in runs if cand.drafter == entry.get("drafter")]
        if not mine or entry.get("temperature", 0.0) != 0.0 or entry.get("dataset") not in DATASETS:
            continue
        have = {int(g) for g in entry.get("alpha_by_position_at_gamma") or {}}
        if entry["dataset"] == own:
            have |= {int(getattr(cand.config, "gamma", 0)) for cand in mine}
        out += [(Candidate(mine[0].config.replace(gamma=g), mine[0].drafter), entry["dataset"])
                for g in range(2, max(have, default=0)) if g not in have]
    return out


# ------------------------------------------------------------------------------------ recording

def latency_batches(batches: str) -> list[int]:
    """The batches the latency grid times: the recorded ones and every batch up to `DENSE_TO` below their largest."""
    asked = int_list(batches, "batch", 1)
    return sorted(set(asked) | set(range(1, min(DENSE_TO, max(asked)) + 1)))


def stage_latency(args, log) -> None:
    out = args.out / "latency.parquet"
    batches = latency_batches(args.batches)
    common = ["--ctx", CONTEXTS, "--batch", ",".join(map(str, batches)), "--cache", "batch",
              "--threads", str(args.threads), "--rounds", str(args.rounds), "--quiet"]
    if not out.exists():
        run_module("traces.timing", ["--model", "smollm2", "--tokens", TARGET_TOKENS, *common, "--out", str(out)], log)
    used = drafters_used(args)
    for name in (d for d in DRAFT_MODELS if d in used):
        out = args.out / f"{name}_latency.parquet"
        if not out.exists():
            run_module("traces.timing", ["--model", "smollm2", "--no-target", "--drafter", drafter_file(args, name),
                                         "--tokens", DRAFT_TOKENS, *common, "--out", str(out)], log)
    out = args.out / FEATURE_LATENCY
    features = [d for d in FEATURE_DRAFTERS if d in used]
    if out.exists() or not features:
        return
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    entries = {k: v for k, v in drafter_entries(TARGET_ARCH).items() if k in features}
    frame = write_drafter_latency(out, (TARGET_ARCH,), int_list(CONTEXTS, "ctx", 0), Timer(device, 1, 5, 3, 2.0),
                                  device, torch.float32, entries=entries, batches=batches,
                                  rows=True)
    log(f"wrote {len(frame)} latency rows of {', '.join(features)} to {out}")


def stage_steps(args, log) -> None:
    """BatchStepTraces of RUNS on `--prompts` at every batch (`Bench.measure_batches`), one file per
    configuration (plain decoding's file holds every configuration's partners). Batches that every
    file lacks are recorded and added to the files (`batches_to_record`)."""
    plain, *runs = selected_runs(args.runs)
    recorded = {cand: recorded_batches(step_path(args, cand)) for cand in [plain, *runs]}
    todo = batches_to_record(int_list(args.batches, "batch", 1), recorded, step_path(args, plain))
    if not todo:
        return
    earlier = {cand: read_trace(step_path(args, cand), kind="batch_step")[0] for cand in recorded if recorded[cand]}
    first_pair = max((int(f["pair"].max()) + 1 for f in earlier.values()), default=0)
    bench = Bench("smollm2", DRAFTERS, args.drafters, args.threads)
    prompts = bench.encode(load_prompt_mix(args.prompts))
    _, steps = bench.measure_batches([plain, *runs], prompts, todo, repeats=args.repeats,
                                     max_new_tokens=args.max_new_tokens, log=log, first_pair=first_pair,
                                     prompts_at=lambda batch: max(batch, args.min_prompts))
    for cand in [plain, *runs]:
        fresh = steps[steps["candidate"] == cand.label].drop(columns=["candidate"])
        rows = pd.concat([earlier[cand], fresh], ignore_index=True) if cand in earlier else fresh
        write_batch_steps(args, cand, rows, sorted(recorded[cand] | set(todo)))
    log(f"wrote {len(runs) + 1} batch step traces at batch {','.join(map(str, todo))} to {args.out}")


def recorded_batches(path: Path) -> set[int]:
    """The batch limits a BatchStepTrace file holds runs at (none where there is no file)."""
    return set(read_trace(path, kind="batch_step")[0]["max_batch"].astype(int)) if path.exists() else set()


def batches_to_record(asked: list[int], recorded: dict[Candidate, set[int]], plain_path: Path) -> list[int]:
    """The asked batches no file holds yet; InputError where the files disagree on the batches they
    hold (a configuration added later would have no partners of its own at the earlier batches)."""
    if len({frozenset(b) for b in recorded.values()}) > 1:
        raise InputError(f"{plain_path} holds the partners of an earlier recording at other batches than some "
                         "configuration's file: record every configuration afresh (remove the folder's steps_*.parquet)")
    held = next(iter(recorded.values()))
    return [b for b in asked if b not in held]


def stage_chains(args, log) -> None:
    """`lacking_chains` recorded (those not on disk), untimed, on each dataset's calibration prompts."""
    prompts = token_prompts(args)
    for cand, dataset in lacking_chains(args, Profile.load(args.base_profile)):
        path = chain_path(args, cand, dataset)
        if not path.exists():
            record_untimed(args, cand.config, cand.drafter, path, log, prompts[dataset])
            log(f"wrote {path}")


def write_batch_steps(args, cand: Candidate, rows: pd.DataFrame, batches: list[int]) -> None:
    meta = schema.RunMetadata(kind="batch_step", models={"target": "smollm2", **({"drafter": cand.drafter}
                                                                                  if cand.drafter else {})},
                              hardware="CPU", dtype="fp32", temperature=0.0, dataset=args.prompts, seed=0,
                              commit=git_commit(), extra={"label": cand.label, "threads": args.threads,
                                                          "repeats": args.repeats, "batches": ",".join(map(str, batches)),
                                                          "measured_by": "campaigns.measure.Bench.measure_batches"})
    schema.write_trace(step_path(args, cand), rows, meta)


# ------------------------------------------------------------------------------------ calibration

def latency_tables(args) -> dict[str, dict]:
    """Profile latency models (measured tables) of the target and of each batched drafter the runs use."""
    used = drafters_used(args)
    own = {f"{d}_latency.parquet": d for d in DRAFT_MODELS if d in used}
    files = ["latency.parquet", *own, *([FEATURE_LATENCY] if any(d in used for d in FEATURE_DRAFTERS) else [])]
    frames = {f: read_trace(args.out / f, kind="latency")[0] for f in files}
    for file, name in own.items():   # its rows name the file the drafter was loaded from, on whichever machine
        frames[file] = frames[file].assign(model=DRAFTERS[name].model)
    rows = pd.concat(frames.values(), ignore_index=True)
    rows["model"] = rows["model"].replace({"smollm2": TARGET_ARCH})
    out = {}
    for model, group in rows[rows["role"].isin(["target", "draft"])].groupby("model"):
        fitted = fit_latency(group, "table", arch=None, hardware="CPU", dtype="fp32", name=model).to_dict()
        fitted["fit"] = {k: v for k, v in fitted["fit"].items() if not (isinstance(v, float) and np.isnan(v))}
        out[model] = fitted
    return out


def carried(base, used: frozenset[str] | set[str] = frozenset(BATCHED_DRAFTERS)) -> tuple[dict, dict, list[str]]:
    """(acceptance entries, drafter entries, their keys) of the base Profile that the batch engine runs:
    the drafter-less methods' own entries (`OWN_ENTRIES`) and the batched drafters' (`BATCHED_DRAFTERS`) the
    recorded runs `used`."""
    drafters = {name: base.drafter(name).to_dict() for name in BATCHED_DRAFTERS if name in used}
    drafters |= {name: base.drafter(name).to_dict() for name in OWN_ENTRIES}
    keys = [k for k, a in base.acceptance.items() if a.drafter in drafters or k.split("/")[0] in drafters]
    return {k: base.acceptance[k].to_dict() for k in keys}, drafters, keys


def with_recorded_chains(acceptance: dict, recorded: list[tuple[str, str, pd.DataFrame, str]]) -> dict:
    """The carried acceptance entries (`carried`) with the chain lengths their base Profile did not
    record measured in this campaign's own runs of the same drafter on the same data (`recorded`:
    drafter, dataset, BatchStepTrace rows or chain StepTrace rows, file name), each prompt's steps
    once: rows decode alike at every batch, and the runs at batch 1, 2 and 4 decode the same prompts."""
    out = dict(acceptance)
    for key, entry in acceptance.items():
        mine = [(rows, name) for drafter, dataset, rows, name in recorded
                if drafter == entry.get("drafter") and dataset == entry.get("dataset") and "accept_mask" in rows]
        if not mine or entry.get("temperature", 0.0) != 0.0:
            continue
        rows = pd.concat([r for r, _ in mine], ignore_index=True)
        ids = [rows[column] for column in ("request_id", "prompt_id") if column in rows]   # batch rows, chain rows
        rows = rows.assign(prompt=ids[0] if len(ids) == 1 else ids[0].fillna(ids[1]))
        rows = rows.assign(nth=rows.groupby(["run_id", "prompt"]).cumcount()).drop_duplicates(["config", "prompt", "nth"])
        out[key] = with_chains(entry, rows, f"{', '.join(n for _, n in mine)} ({rows['prompt'].nunique()} prompts)")
    return out


def stage_profile(args, log) -> None:
    base = Profile.load(args.base_profile)
    acceptance, drafters, keys = carried(base, drafters_used(args))
    runs, chains = [], []
    for cand in selected_runs(args.runs):
        frame, meta = read_trace(step_path(args, cand), kind="batch_step")
        recorded_as = str(frame["dataset"].iloc[0])
        dataset = base.dataset_named(recorded_as)          # the Profile's name of the prompt set: 'libedit' -> 'lib-edit'
        if dataset is None:
            raise InputError(f"{step_path(args, cand)}: dataset '{recorded_as}' is none of the base Profile's "
                             f"({', '.join(base.datasets())})")
        runs.append(StepRun(batch_steps(frame).assign(dataset=dataset), cand.drafter, dataset))
        if cand.drafter:
            chains.append((cand.drafter, dataset, frame, step_path(args, cand).name))
    for cand, dataset in lacking_chains(args, base):
        path = chain_path(args, cand, dataset)
        if path.exists():
            chains.append((cand.drafter, dataset, read_trace(path, kind="step")[0], path.name))
    acceptance = with_recorded_chains(acceptance, chains)
    recorded = [p.prompt_id for p in load_prompt_mix(args.prompts)]
    profile = Profile.build(
        name="smollm2-135m on this CPU, continuous batching (project recordings)", hardware="CPU", dtype="fp32",
        target=TARGET_ARCH, models={TARGET_ARCH: base.arch().to_dict()}, latency=latency_tables(args),
        acceptance=acceptance, drafters=drafters, workload={d: w.to_dict() for d, w in base.workload.items()},
        machine=timed_on(args.out / "latency.parquet", this_machine(args.threads)).to_dict(),
        provenance={"built_by": "python -m experiments.smollm2_batch", "commit": git_commit(),
                    "created": dt.datetime.now(dt.timezone.utc).isoformat(),
                    "sources": [str(p) for p in sorted(args.out.glob("*.parquet"))],
                    "carried": {"from": str(args.base_profile), "acceptance": keys, "workload": sorted(base.workload),
                                "why": "the same trained drafters on the same datasets: acceptance belongs to "
                                       "(target, drafter, data), not to the batch (each row decodes as it does alone); chain "
                                       "lengths the base did not record come from this campaign's own chains (each "
                                       "entry's source names them)"},
                    "assumptions": [f"greedy decoding; the batch engine (runtime.engine.batch) at batch {args.batches} "
                                    f"on {args.prompts} (max(B, {args.min_prompts}) prompts per run), "
                                    f"{args.max_new_tokens} new tokens", f"latency: measured tables in the batch engine's "
                                    f"caches (traces.timing --cache batch), fp32, {args.threads} thread(s) pinned to one core",
                                    "engine: padded rows (widest tree, longest context), per-row host terms and per-request "
                                    "prefill fitted from the BatchStepTraces (calibrate.batch_engine)"],
                    "calibration_prompts": sorted(set(base.provenance.calibration_prompts) | set(recorded))})
    engine = fit_batch_engine(profile, runs)
    profile = replace(profile, engine=EngineTerms.of(engine))
    heldout = engine["fit"]["heldout"]
    log(f"batch engine calibration: held-out speedup error median {100 * heldout['speedup_error_median']:.1f}%, "
        f"p90 {100 * heldout['speedup_error_p90']:.1f}%; terms on a bound: {engine['fit']['warnings'] or 'none'}")
    profile.save(args.profile)
    log(f"wrote {args.profile}")
