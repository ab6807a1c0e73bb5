"""Tables of `python -m experiments.smollm2_cpu` (stage `tables`): what the SmolLM2 recordings show.

- the acceptance table in GLIDE Table 1's shape (c, alpha, Leviathan's expected speedup at gamma 5);
- the papers' qualitative claims checked on this pair, one line each with its numbers;
- measured vs predicted: each recorded run's decode wall clock against `ar` (its own plain-decoding
  partners where it was measured in pairs), next to the speedup
  the sweep's closed form and the simulator predict from the Profile alone;
- the sweep's best configuration per method on the Profile.
Written to `--report` as CSV files and a README.md.
"""
from __future__ import annotations

import json

import pandas as pd

import methods
from methods import BASELINE
from methods.spec import Evidence
from common.errors import InputError
from common.seeds import derive_seed
from sweep.markdown import md_table
from campaigns.smollm2 import (PLAIN_RUN, CHAIN_RUNS, DATASETS, DRAFTERS, RUNS, Run,
                                     best_partners_path, best_runs, step_path,
                                     token_prompt_count)
from campaigns.smollm2_profile import latency_rows
from traces.schema import step_wall_s, read_trace
from sweep.executor import LocalExecutor
from sweep.run import SweepOptions, run_sweep
from sweep import scoring
from calibrate.fit_acceptance import fit_step_acceptance
from costmodel.leviathan import speedup
from profiles.profile import Profile
from common import atomic


def decode_rate(frame: pd.DataFrame) -> tuple[float, float, float]:
    """(seconds per token, tokens per step, mean context) over a StepTrace's decode steps."""
    seconds = float(step_wall_s(frame).sum())
    tokens = float(frame["accepted"].sum())
    return seconds / tokens, tokens / len(frame), float(frame["ctx_len"].mean())


def all_runs(args, dataset: str) -> list[Run]:
    """The fixed RUNS, then the sweep's best of stage `best` (when it ran)."""
    return list(RUNS) + best_runs(args).get(dataset, [])


def ar_context(args, dataset: str) -> float:
    """Mean context of the plain decoding steps: where the predictions are priced."""
    return float(read_trace(step_path(args, BASELINE, dataset), kind="step")[0]["ctx_len"].mean())


def measured_runs(args, dataset: str) -> pd.DataFrame:
    """Each recorded run's decode rate and its measured speedup: over its own plain-decoding
    partners where it was measured in pairs (traces.drift), else over the whole ar trace."""
    plain, _ = read_trace(step_path(args, PLAIN_RUN.label, dataset), kind="step")
    partners = best_partners_path(args, dataset)          # the recorded best's own plain partners
    paired_plain = pd.concat([plain, read_trace(partners, kind="step")[0]], ignore_index=True) \
        if partners.exists() else plain
    rows = []
    for run in all_runs(args, dataset):
        frame, _ = read_trace(step_path(args, run.label, dataset), kind="step")
        per_token, per_step, ctx = decode_rate(frame)
        pairs = set(frame.loc[frame["pair"] >= 0, "pair"]) if run.method != BASELINE else set()
        partners = paired_plain[paired_plain["pair"].isin(pairs)] if pairs else plain
        if pairs and set(partners["pair"]) != pairs:
            raise InputError(f"{run.label} ({dataset}) was measured in pairs whose plain decoding is in no trace "
                             f"of {args.out}: record it again (stage best or steps)")
        rows.append({"dataset": dataset, "run": run.label, "method": run.method, "drafter": run.drafter or "-",
                     "config": json.dumps(run.config.to_dict()), "prompts": frame["prompt_id"].nunique(),
                     "steps": len(frame), "measured_tokens_per_step": per_step, "seconds_per_token": per_token,
                     "ctx_len": ctx, "measured_speedup": decode_rate(partners)[0] / per_token,
                     "paired": bool(pairs)})
    return pd.DataFrame(rows)


def sweep_result(profile, dataset: str, ctx_len: float, sim_tokens: int, seed: int):
    """The sweep on `profile` alone at greedy decoding, `dataset`, priced at `ctx_len` (one process)."""
    opts = SweepOptions(temperature=0.0, dataset=dataset, ctx_len=int(round(ctx_len)), seed=seed,
                        sim_tokens=sim_tokens, rescore=1)
    return run_sweep([profile], opts, LocalExecutor(workers=1, progress=False))


SIM_STREAMS = 20       # the simulator's streams per recorded run (as long as the recorded generations)


def predict_run(profile, run: Run, setting, sim_tokens: int, seed: int) -> dict[str, float]:
    """One recorded run priced from the Profile alone: the closed form (`sweep.scoring.score`
    of the configuration the Profile prices, on the run's drafter and the dataset's acceptance
    entry) and the simulator (SIM_STREAMS seeded streams, pooled: `sweep.scoring.simulate_task`)."""
    spec = methods.get(run.method)
    setup = profile.setups_for(spec, temperature=setting.temperature, dataset=setting.dataset, drafter=run.drafter)[0]
    scored = scoring.score(setup, run.method, spec.frame_of([run.priced]), setting)
    sim = scoring.simulate_task(scoring.SimTask(profile, run.method, scoring.sim_config(scored), setting,
                                                seed, sim_tokens, SIM_STREAMS))
    return {"predicted_speedup": float(scored["speedup"].iloc[0]),
            "predicted_tokens_per_step": float(scored["tokens_per_step"].iloc[0]),
            "simulated_speedup": sim["sim_speedup"], "simulated_p05": sim["sim_p05"], "simulated_p95": sim["sim_p95"]}


def predictions(profile, dataset: str, ctx_len: float, sim_tokens: int, seed: int,
                best: list[Run]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per recorded run: closed-form and simulated speedup for generations as long as the traces'
    (the Profile's workload); the sweep's best per method)."""
    result = sweep_result(profile, dataset, ctx_len, sim_tokens, seed)
    recorded = profile.workload_new_tokens(dataset) or sim_tokens
    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset, new_tokens=recorded)
    runs = [run for run in RUNS if run != PLAIN_RUN] + list(best)
    rows = [{"dataset": dataset, "run": run.label,
             **predict_run(profile, run, setting, recorded, derive_seed(seed, profile.name, dataset, run.label))}
            for run in runs]
    best = result.best[["method", "drafter", "config", "speedup", "tokens_per_step"]
                       + [c for c in ("sim_speedup",) if c in result.best]].copy()
    best.insert(0, "dataset", dataset)
    return pd.DataFrame(rows), best


def acceptance_table(args, profile, ctx_len: float) -> pd.DataFrame:
    """GLIDE Table 1's shape per (drafter, dataset): c, alpha, expected speedup at gamma 5; alpha
    from the StepTraces of a gamma-4 chain where one was recorded (like with like), else the TokenTrace."""
    target_s = float(profile.seconds(profile.target, 1, ctx_len))
    rows = []
    for drafter, spec in DRAFTERS.items():
        if not spec.model:
            continue
        c = float(profile.seconds(spec.model, 1, ctx_len)) / target_s
        for dataset in DATASETS:
            if drafter in CHAIN_RUNS:
                label = CHAIN_RUNS[drafter].label
                frame, _ = read_trace(step_path(args, label, dataset), kind="step")
                alpha, source = fit_step_acceptance(frame, drafter=drafter, dataset=dataset)["alpha"], label
            else:
                alpha, source = profile.acceptance_model(f"{drafter}/{dataset}/T0").alpha, "teacher-forced tokens"
            rows.append({"drafter": drafter, "dataset": dataset, "c": c, "alpha": alpha,
                         "expected_speedup_g5": float(speedup(alpha, 5, c)), "alpha_from": source})
    return pd.DataFrame(rows)


def claims(args, profile, acc: pd.DataFrame) -> list[str]:
    """The papers' qualitative claims, checked on this pair: each method's own (`MethodSpec.claims`),
    one line each, with the numbers."""
    evidence = Evidence(profile, DRAFTERS, tuple(DATASETS), acc, latency_rows(args))
    return [line for spec in methods.specs() for line in spec.claims(evidence)]


def training_table(drafters) -> pd.DataFrame:
    """The final numbers of each drafter's `training.json` (python -m training), with the command
    that repeats the run exactly, or the JSON's word that it does not."""
    rows = []
    for path in sorted(drafters.glob("*/training.json")):
        info = json.loads(path.read_text())
        rows.append({"drafter": info["kind"], "steps": info["steps"], "minutes": info["seconds"] / 60,
                     "untrained_eval_loss": info["untrained"]["eval_loss"],
                     "untrained_eval_top1": info["untrained"]["eval_top1"],
                     "final_train_loss": info["final"]["train_loss"], "final_eval_loss": info["final"]["eval_loss"],
                     "final_eval_top1": info["final"]["eval_top1"],
                     "eval_windows": info["data"]["eval_windows"], "reproduce": f"`{info['reproduce']}`"})
    return pd.DataFrame(rows)


def _md(frame: pd.DataFrame, digits: int = 3) -> str:
    return md_table(frame, list(frame.columns), f".{digits}f")


def write_report(args, log) -> None:
    profile = Profile.load(args.profile)
    measured = pd.concat([measured_runs(args, d) for d in DATASETS], ignore_index=True)
    preds, bests = [], []
    for dataset in DATASETS:
        ctx = ar_context(args, dataset)
        p, b = predictions(profile, dataset, ctx, args.sim_tokens, args.seed, best_runs(args).get(dataset, []))
        preds.append(p)
        bests.append(b)
    table = measured.merge(pd.concat(preds), on=["dataset", "run"], how="left")
    spec = table["run"] != PLAIN_RUN.label
    table.loc[spec, "closed_form_error"] = table["predicted_speedup"] / table["measured_speedup"] - 1
    table.loc[spec, "simulator_error"] = table["simulated_speedup"] / table["measured_speedup"] - 1
    ctx_all = float(measured["ctx_len"].mean())
    acc = acceptance_table(args, profile, ctx_all)
    lines = claims(args, profile, acc)
    best = pd.concat(bests, ignore_index=True)
    out = args.report
    atomic.write_csv(out / "measured_vs_predicted.csv", table)
    atomic.write_csv(out / "acceptance.csv", acc)
    atomic.write_csv(out / "sweep_best.csv", best)
    errs = table.loc[spec, ["closed_form_error", "simulator_error"]].abs()
    summary = (f"closed form: median |error| {100 * errs['closed_form_error'].median():.1f}%, worst "
               f"{100 * errs['closed_form_error'].max():.1f}%; simulator: median {100 * errs['simulator_error'].median():.1f}%, "
               f"worst {100 * errs['simulator_error'].max():.1f}%")
    show = table[["dataset", "run", "measured_tokens_per_step", "predicted_tokens_per_step", "measured_speedup",
                  "predicted_speedup", "simulated_speedup", "closed_form_error", "simulator_error"]]
    trained = training_table(args.drafters)
    atomic.write_csv(out / "training.csv", trained)
    text = "\n\n".join([
        "# SmolLM2-135M-Instruct on this CPU: acceptance and measured vs predicted speedups",
        f"Regenerate: `python -m experiments.smollm2_cpu` (drafters from `python -m training KIND`). Greedy, "
        f"MT-Bench (turn 1), HumanEval, code-edit and lib-edit (edit requests on HumanEval's and boltons' functions), {args.max_new_tokens} new tokens, fp32, "
        f"{args.threads} threads. Profile: `{args.profile}`, its acceptance fitted on the TokenTraces' "
        f"{token_prompt_count(args)} prompts per set (`--token-prompts`); measured runs on the first {args.limit} of "
        "each (in-sample: they are among the TokenTraces' prompts).",
        "## The drafters (python -m training, 2 CPU cores)\nHeld-out numbers are on the held-out windows of "
        "the training corpus (eval_windows; top-1 = agreement with the target's argmax; coral/router: the first draft after the "
        "root; router losses are its own group cross-entropy).\n\n" + _md(trained),
        "## Acceptance (GLIDE Table 1's shape)\nc = drafter / target forward latency at one token and the mean "
        f"context ({ctx_all:.0f}); alpha = per-token acceptance; expected speedup = Leviathan's at gamma 5.\n\n"
        + _md(acc),
        "## The papers' qualitative claims on this pair\n" + "\n".join(f"- {line}" for line in lines),
        "## Measured vs predicted on the CALIBRATION data (in-sample)\nMeasured: decode wall clock of the "
        "StepTraces (draft + verify + overhead per token) against `ar` on the same prompts (each run against its own "
        "plain-decoding partners where it was recorded in pairs). Predicted from the "
        f"Profile alone, for generations as long as the recorded ones: the sweep's closed form and the simulator "
        f"({SIM_STREAMS} seeded streams, pooled). These are the runs the "
        "Profile's acceptance and engine calibration were fitted on, so this table checks the fit, not a "
        "prediction; the held-out judgement is `python -m experiments.fidelity` on other prompts "
        f"(examples/smollm2_fidelity).\n\n{summary}\n\n" + _md(show),
        "## The sweep's best configuration per method on this Profile\n" + (
            "Predicted here; stage `best` recorded each of them for real: the `best ...` rows of the table above "
            "are their measured speedups." if best_runs(args) else
            "Predicted here only (stage `best` has not recorded them: `--stages best,tables` adds their measured "
            "speedups to the table above as `best ...` rows).") + "\n\n" + _md(best),
    ])
    atomic.write_text(out / "README.md", text + "\n")
    print(text)


