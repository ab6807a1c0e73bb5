"""Tables of `python -m experiments.smollm2_cpu` (stage `tables`): what the SmolLM2 recordings show.

- the acceptance table in GLIDE Table 1's shape (c, alpha, Leviathan's expected speedup at gamma 5);
- the papers' qualitative claims checked on this pair, one line each with its numbers;
- measured vs predicted: each recorded run's decode wall clock against `ar`, next to the speedup
  the sweep's closed form and the simulator predict from the Profile alone;
- the sweep's best configuration per method on the Profile.
Written to `--report` as CSV files and a README.md.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from experiments.smollm2_cpu import (DATASETS, DRAFTERS, ROUTER, RUNS, TARGET_ARCH, best_runs, latency_rows,
                                      step_path)
from common.errors import InputError


def decode_rate(frame: pd.DataFrame) -> tuple[float, float, float]:
    """(seconds per token, tokens per step, mean context) over a StepTrace's decode steps."""
    seconds = float((frame["draft_s"] + frame["verify_s"] + frame["overhead_s"]).sum())
    tokens = float(frame["accepted"].sum())
    return seconds / tokens, tokens / len(frame), float(frame["ctx_len"].mean())


def all_runs(args, dataset: str) -> list[tuple[str, str, dict[str, Any], str | None]]:
    """The fixed RUNS, then the sweep's best of stage `best` (when it ran)."""
    best = [(r["label"], r["method"], r["config"], r["drafter"]) for r in best_runs(args).get(dataset, [])]
    return list(RUNS) + best


def ar_context(args, dataset: str) -> float:
    """Mean context of the plain decoding steps: where the predictions are priced."""
    from traces.schema import read_trace

    return float(read_trace(step_path(args, "ar", dataset), kind="step")[0]["ctx_len"].mean())


def measured_runs(args, dataset: str) -> pd.DataFrame:
    from traces.schema import read_trace

    rows = []
    for label, method, config, drafter in all_runs(args, dataset):
        frame, _ = read_trace(step_path(args, label, dataset), kind="step")
        per_token, per_step, ctx = decode_rate(frame)
        rows.append({"dataset": dataset, "run": label, "method": method, "drafter": drafter or "-",
                     "config": json.dumps(config), "prompts": frame["prompt_id"].nunique(), "steps": len(frame),
                     "measured_tokens_per_step": per_step, "seconds_per_token": per_token, "ctx_len": ctx})
    out = pd.DataFrame(rows)
    ar = float(out.loc[out["method"] == "ar", "seconds_per_token"].iloc[0])
    out["measured_speedup"] = ar / out["seconds_per_token"]
    return out


# run label -> (sweep method, drafter, column filter of that method's scored table)
PREDICT: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "sd g4": ("sd", "vanilla", {"gamma": 4}),
    "mcsd 2x2x1": ("mcsd", "vanilla", {"k": "2x2x1", "replacement": True}),
    "cape g4": ("cape", "vanilla", {"gamma": 4, "bins": (8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2)}),
    "glide g4": ("sd", "glide", {"gamma": 4}),
    "lookahead W5 N3 G5": ("lookahead", None, {"W": 5, "N": 3, "G": 5}),
    "lookahead W7 N4 G7": ("lookahead", None, {"W": 7, "N": 4, "G": 7}),
    "kangaroo g6 eta0.6": ("kangaroo", "kangaroo", {"gamma": 6, "eta": 0.6}),
    "coral g4": ("coral", "coral", {"gamma": 4, "groups": 0}),
    "coral g4 router16:2": ("coral", "coral-router", {"gamma": 4, "router_built_in": True}),
}


def _pick(table: pd.DataFrame, drafter: str | None, want: dict[str, Any]) -> pd.Series:
    rows = table if drafter is None else table[table["drafter"] == drafter]
    for col, value in want.items():
        if isinstance(value, tuple):
            rows = rows[rows[col].map(lambda v: tuple(int(x) for x in v) == value)]
        elif isinstance(value, float):
            rows = rows[np.isclose(rows[col].astype(float), value)]
        else:
            rows = rows[rows[col] == value]
    if rows.empty:
        raise InputError(f"no scored configuration matches {drafter} {want}")
    return rows.iloc[0]


def sweep_result(profile, dataset: str, ctx_len: float, sim_tokens: int, seed: int):
    """The sweep on `profile` alone at greedy decoding, `dataset`, priced at `ctx_len` (one process)."""
    from experiments.executor import LocalExecutor
    from experiments.sweep import SweepOptions, run_sweep

    opts = SweepOptions(temperature=0.0, dataset=dataset, ctx_len=int(round(ctx_len)), seed=seed,
                        sim_tokens=sim_tokens, rescore=1)
    return run_sweep([profile], opts, LocalExecutor(workers=1, progress=False))


def predictions(profile, dataset: str, ctx_len: float, sim_tokens: int, seed: int,
                best: list[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per recorded run: closed-form and simulated speedup; the sweep's best per method)."""
    from experiments import scoring, spaces

    result = sweep_result(profile, dataset, ctx_len, sim_tokens, seed)
    setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx_len)), dataset=dataset)
    tables = dict(result.tables)
    glide_key = next(k for k, a in profile.acceptance.items() if a["drafter"] == "glide" and a["dataset"] == dataset)
    tables["glide"] = scoring.score(profile, "sd", {"drafter": "glide", "acceptance": glide_key}, spaces.sd_space(), setting)
    wanted = dict(PREDICT)
    wanted.update({r["label"]: (r["sweep_method"], r["drafter"], {"config": r["sweep_config"]}) for r in best})
    rows = []
    for i, (label, (method, drafter, want)) in enumerate(wanted.items()):
        row = _pick(tables["glide" if drafter == "glide" else method], drafter, want).to_dict()
        sim_method = "glide" if drafter == "glide" else method
        sim = scoring.simulate_task(scoring.SimTask(profile.to_dict(), sim_method, scoring.sim_config(method, row), setting,
                                                    seed + i, sim_tokens, 5))
        rows.append({"dataset": dataset, "run": label, "predicted_speedup": row["speedup"],
                     "predicted_tokens_per_step": row["tokens_per_step"], "simulated_speedup": sim["sim_speedup"],
                     "simulated_p05": sim["sim_p05"], "simulated_p95": sim["sim_p95"]})
    best = result.best[["method", "drafter", "config", "speedup", "tokens_per_step"]
                       + [c for c in ("sim_speedup",) if c in result.best]].copy()
    best.insert(0, "dataset", dataset)
    return pd.DataFrame(rows), best


def acceptance_table(args, profile, ctx_len: float) -> pd.DataFrame:
    """GLIDE Table 1's shape per (drafter, dataset): c, alpha, expected speedup at gamma 5; alpha
    from the StepTraces of a gamma-4 chain where one was recorded (like with like), else the TokenTrace."""
    from calibrate.fit_acceptance import fit_step_acceptance
    from costmodel.leviathan import speedup
    from traces.schema import read_trace

    target_s = float(profile.latency_model(profile.target).predict(np.array([1]), ctx_len, 1)[0])
    chain_runs = {"vanilla": "sd g4", "glide": "glide g4", "coral": "coral g4", "coral-router": "coral g4 router16:2"}
    rows = []
    for drafter in ("vanilla", "glide", "kangaroo", "coral", "coral-router"):
        model = DRAFTERS[drafter][1]["model"]
        c = float(profile.latency_model(model).predict(np.array([1]), ctx_len, 1)[0]) / target_s
        for dataset in DATASETS:
            if drafter in chain_runs:
                frame, _ = read_trace(step_path(args, chain_runs[drafter], dataset), kind="step")
                alpha, source = fit_step_acceptance(frame, drafter=drafter, dataset=dataset)["alpha"], chain_runs[drafter]
            else:
                alpha, source = profile.acceptance[f"{drafter}/{dataset}/T0"]["alpha"], "teacher-forced tokens"
            rows.append({"drafter": drafter, "dataset": dataset, "c": c, "alpha": alpha,
                         "expected_speedup_g5": float(speedup(alpha, 5, c)), "alpha_from": source})
    return pd.DataFrame(rows)


def claims(args, profile, acc: pd.DataFrame) -> list[str]:
    """The papers' qualitative claims, checked on this pair: one line each, with the numbers."""
    lines = []
    for dataset in DATASETS:
        a = acc[acc["dataset"] == dataset].set_index("drafter")["alpha"]
        holds = a["glide"] > a["vanilla"]
        lines.append(f"GLIDE beats a vanilla drafter of the same size (1 layer) on {dataset}: "
                     f"alpha {a['glide']:.3f} vs {a['vanilla']:.3f} -> {'holds' if holds else 'does NOT hold'}")
        spec = profile.acceptance[f"vanilla/{dataset}/T0"]
        at_k = {int(k): v for k, v in (spec.get("alpha_at_k") or {}).items()}
        ks = sorted(at_k)
        rising = all(at_k[x] <= at_k[y] for x, y in zip(ks, ks[1:]))
        lines.append(f"acceptance rises with k (MCSS, vanilla, {dataset}): "
                     + ", ".join(f"alpha@{k} {at_k[k]:.3f}" for k in ks) + f" -> {'holds' if rising else 'does NOT hold'}")
        bins = spec.get("conf_bins") or {}
        hit, freq = np.asarray(bins.get("topk_hit", {}).get("1", []), float), np.asarray(bins.get("freq", []), float)
        if hit.size:
            filled = freq > 0.005
            low, high = hit[filled][: filled.sum() // 2], hit[filled][filled.sum() // 2:]
            corr = float(np.corrcoef(np.arange(hit.size)[filled], hit[filled])[0, 1]) if filled.sum() > 2 else float("nan")
            lines.append(f"acceptance rises with the drafter's confidence (GLIDE Fig. 1b, vanilla, {dataset}): top-1 hit by "
                         f"confidence decile " + " ".join(f"{h:.2f}" if f else "-" for h, f in zip(hit, filled))
                         + f"; correlation {corr:.2f}, lower-half mean {low.mean():.2f} vs upper-half {high.mean():.2f} -> "
                         + ("holds" if corr > 0.5 else "does NOT hold"))
    rows = latency_rows(args)
    one = rows[(rows["n_tokens"] == 1) & (rows["batch"] == 1)]
    head = float(one.loc[one["role"] == "lm_head", "seconds"].median())
    routed = float(one.loc[one["role"] == "router_head", "seconds"].median())
    eagle = float(one.loc[one["model"] == f"eagle@{TARGET_ARCH}", "seconds"].median())
    eagle_r = float(one.loc[one["model"] == f"eagle-router{ROUTER[0]}:{ROUTER[1]}@{TARGET_ARCH}", "seconds"].median())
    lines.append(f"the LM head dominates the feature drafter's latency at this vocabulary (CORAL Fig. 2): head "
                 f"{1e3 * head:.2f} ms of the drafter's {1e3 * eagle:.2f} ms ({100 * head / eagle:.0f}%) -> "
                 f"{'holds' if head > 0.5 * eagle else 'does NOT hold'}; the {ROUTER[0]}:{ROUTER[1]} router cuts the head to "
                 f"{1e3 * routed:.2f} ms and the drafter to {1e3 * eagle_r:.2f} ms ({eagle / eagle_r:.2f}x) -> "
                 f"{'holds' if eagle_r < eagle else 'does NOT hold'}")
    return lines


def training_table(drafters) -> pd.DataFrame:
    """The final numbers of each drafter's `training.json` (python -m training), with the command
    that repeats the run exactly."""
    rows = []
    for path in sorted(drafters.glob("*/training.json")):
        info = json.loads(path.read_text())
        rows.append({"drafter": info["kind"], "steps": info["steps"], "minutes": info["seconds"] / 60,
                     "untrained_eval_loss": info["untrained"]["eval_loss"],
                     "untrained_eval_top1": info["untrained"]["eval_top1"],
                     "final_train_loss": info["final"]["train_loss"], "final_eval_loss": info["final"]["eval_loss"],
                     "final_eval_top1": info["final"]["eval_top1"], "reproduce": f"`{info['reproduce']}`"})
    return pd.DataFrame(rows)


def _md(frame: pd.DataFrame, digits: int = 3) -> str:
    cols = list(frame.columns)
    fmt = lambda v: f"{v:.{digits}f}" if isinstance(v, float) else str(v)
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)])


def write_report(args, log) -> None:
    from calibrate.profile import Profile
    from common import atomic

    profile = Profile.load(args.profile)
    measured = pd.concat([measured_runs(args, d) for d in DATASETS], ignore_index=True)
    preds, bests = [], []
    for dataset in DATASETS:
        ctx = ar_context(args, dataset)
        p, b = predictions(profile, dataset, ctx, args.sim_tokens, args.seed, best_runs(args).get(dataset, []))
        preds.append(p)
        bests.append(b)
    table = measured.merge(pd.concat(preds), on=["dataset", "run"], how="left")
    spec = table["method"] != "ar"
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
        f"first {args.limit} prompts of MT-Bench (turn 1) and HumanEval, {args.max_new_tokens} new tokens, fp32, "
        f"{args.threads} threads. Profile: `{args.profile}`.",
        "## The drafters (python -m training, 2 CPU cores)\nHeld-out numbers are on 41 windows of the "
        "training corpus (top-1 = agreement with the target's argmax; coral/router: the first draft after the "
        "root; router losses are its own group cross-entropy).\n\n" + _md(trained),
        "## Acceptance (GLIDE Table 1's shape)\nc = drafter / target forward latency at one token and the mean "
        f"context ({ctx_all:.0f}); alpha = per-token acceptance; expected speedup = Leviathan's at gamma 5.\n\n"
        + _md(acc),
        "## The papers' qualitative claims on this pair\n" + "\n".join(f"- {line}" for line in lines),
        "## Measured vs predicted\nMeasured: decode wall clock of the StepTraces (draft + verify + overhead per "
        "token) against `ar` on the same prompts. Predicted from the Profile alone: the sweep's closed form and the "
        "simulator (mean of 5 seeded runs). The acceptance models were fitted on these same runs (in-sample), so "
        f"the errors measure the latency and step models.\n\n{summary}\n\n" + _md(show),
        "## The sweep's best configuration per method on this Profile\nPredicted here; stage `best` recorded "
        "each of them for real: the `best ...` rows of the table above are their measured speedups.\n\n" + _md(best),
    ])
    atomic.write_text(out / "README.md", text + "\n")
    print(text)


