"""Fidelity in batches (`python -m experiments.fidelity --batch 1,2,...`): speculation's decode
throughput over plain decoding at each batch, predicted from a Profile before the batch engine
measures it on held-out prompts, and what a deployment reads off that curve.

Predictions, per configuration and batch B (the prompts' own lengths, `new_tokens` each):
- the closed form (`sweep.scoring.score` at batch B): on a Profile whose engine pads its rows
  (`costmodel.step.PADDED`) the verify forward runs at the widest of B rows' trees (E[max] over the
  rows, `costmodel.step.padded_widths`: prompt lookup's rows propose different lengths) and attends
  over the longest row, here E[the longest of B of the prompts] + half the new tokens
  (`padded_context`);
- the simulator (`simulator.serving`): the prompts arriving together at a batch limit of B, as the
  measurement decodes them (rows join as others finish, the last rows drain alone), each request
  drafted at its own level, spread over requests by the Profile's prompt spread (`simulator.leaning`:
  the slowest row sets how long a batch lasts), decode tokens over decode seconds against plain
  decoding served the same way, `sim_repeats` seeds.
What is read off the curves, predicted against measured: each configuration's and each method's
crossover (the smallest batch of the grid at which it no longer pays, `crossovers`) and the best
draft length at each batch among a method's configurations that differ only in it (`best_k`: the
batch -> K schedule `sweep.export` writes for vLLM).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

import methods
from campaigns.measure import Bench, Candidate
from common import atomic
from common.errors import InputError
from common.seeds import derive_seed
from costmodel.step import step_seconds
from methods import BASELINE
from methods.spec import plain_shape, priced_config
from runtime.engine.batch import check_cache_budget as check_rows
from simulator import Cluster, Workload, simulate_serving
from simulator.leaning import profile_spread
from sweep import scoring
from sweep.deployments import PAYS, stop_and_resume
from sweep.markdown import md_table

SIM_REPEATS = 20        # seeds per (configuration, batch)
WITHIN_K = 0.02         # a predicted best K is right when it measures within this of the best measured


def check_cache_budget(bench: Bench, cands: list[Candidate], batches, context: int) -> None:
    """Refuse, in one line and before anything is written, a batch whose KV caches (the target's and
    the loaded draft models', `context` tokens a row) exceed the memory available."""
    modules = [bench.target.model]
    for cand in cands:
        drafter = bench._drafter_argument(cand)
        if drafter is not None and not isinstance(drafter, str) and all(drafter is not m for m in modules):
            modules.append(drafter)
    for batch in batches:
        check_rows(int(batch), int(context), modules)


def padded_context(lengths, batch: int, new_tokens: int) -> float:
    """E[the longest of `batch` prompts drawn without replacement from `lengths`] + half the new
    tokens: the context a padded batch attends over at its median step."""
    ordered = np.sort(np.asarray(lengths, float))
    n, b = len(ordered), min(int(batch), len(ordered))
    if n == 0:
        raise InputError("no prompts to price a batch of")
    weights = np.array([math.comb(i, b - 1) for i in range(n)], float) / math.comb(n, b)   # P(longest = i-th)
    return float(weights @ ordered) + new_tokens / 2.0


def served_decode(profile, method: str, config: dict, lengths, batch: int, new_tokens: int, seed: int,
                  spread: dict | None = None) -> tuple[float, float]:
    """(decode tokens, decode seconds) of `lengths` prompts arriving together, served at a batch
    limit of `batch` by the simulator (`simulator.serving`), `new_tokens` each, each request drafted
    at its own level as `spread` says (`simulator.leaning.profile_spread`; None: all alike)."""
    trace = pd.DataFrame({"arrival_s": 0.0, "prompt_len": np.asarray(lengths, np.int64), "output_len": int(new_tokens)})
    result = simulate_serving(profile, method, config or None,
                              Workload(arrival="trace", trace=trace, **(spread or {})),
                              Cluster(max_batch=int(batch), kv_tokens=10 ** 9), seed, per_step=True)
    decode = result.iterations[result.iterations["kind"] == "decode"]
    return float(decode["tokens"].sum()), float(decode["seconds"].sum())


def predict_batches(profile, cands: list[Candidate], dataset: str, lengths, batches, new_tokens: int, seed: int,
                    sim_repeats: int = SIM_REPEATS) -> pd.DataFrame:
    """Closed form and simulator per (candidate, batch) on `dataset` (module docstring)."""
    rows = []
    for batch in batches:
        ctx = padded_context(lengths, batch, new_tokens)
        setting = scoring.Setting(temperature=0.0, ctx_len=int(round(ctx)), dataset=dataset, new_tokens=new_tokens,
                                  batch=int(batch))
        plain_s = float(step_seconds(profile.seconds, plain_shape(profile), float(setting.ctx_len), int(batch))[0])
        ar_tokens, ar_s = served_decode(profile, BASELINE, {}, lengths, batch, new_tokens, seed)
        for cand in cands:
            base = {"dataset": dataset, "candidate": cand.label, "method": cand.method, "batch": int(batch),
                    "ctx_len": float(setting.ctx_len)}
            if cand.method == BASELINE:
                rows.append({**base, "predicted_speedup": 1.0, "predicted_tokens_per_step": 1.0,
                             "predicted_step_s": plain_s, "simulated_speedup": 1.0, "sim_se": 0.0})
                continue
            spec = methods.get(cand.method)
            setup = profile.setups_for(spec, temperature=0.0, dataset=dataset, drafter=cand.drafter)[0]
            priced = priced_config(cand.config, setup.drafter_spec) if cand.drafter else cand.config
            scored = scoring.score(setup, cand.method, spec.frame_of([priced]), setting)
            config = scoring.sim_config(scored)
            spread = profile_spread(profile, dataset, cand.method)
            served = np.array([served_decode(profile, cand.method, config, lengths, batch, new_tokens,
                                             derive_seed(seed, profile.name, dataset, cand.label, int(batch), r), spread)
                               for r in range(sim_repeats)])
            ratios = served[:, 0] / served[:, 1] / (ar_tokens / ar_s)
            rows.append({**base, "predicted_speedup": float(scored["speedup"].iloc[0]),
                         "predicted_tokens_per_step": float(scored["tokens_per_step"].iloc[0]),
                         "predicted_step_s": float(scored["step_s"].iloc[0]),
                         "simulated_speedup": float(served[:, 0].sum() / served[:, 1].sum() / (ar_tokens / ar_s)),
                         "sim_se": float(ratios.std(ddof=1) / np.sqrt(len(ratios)) / ratios.mean())
                         if len(ratios) > 1 else float("nan")})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------ read off the curves

def crossovers(fid: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and per method (its best configuration at each batch): the batch where
    speculation stops paying, predicted (closed form, simulator) and measured, how many grid steps
    apart they are (`grid_steps`; inf stands for "pays at every batch"), and the larger batch where each
    curve pays again (`*_pays_again_at`, NaN where none: `sweep.deployments.stop_and_resume`)."""
    grid = sorted(fid["batch"].unique())
    index = {b: i for i, b in enumerate(grid)} | {math.inf: len(grid)}
    spec = fid[fid["method"] != BASELINE]
    curves = [(c, "configuration", g) for c, g in spec.groupby("candidate", sort=False)]
    curves += [(m, "method (best at each batch)", g.groupby("batch")[["predicted_speedup", "simulated_speedup",
                                                                     "measured_speedup"]].max().reset_index())
               for m, g in spec.groupby("method", sort=False)]
    rows = []
    for name, kind, g in curves:
        by = g.set_index("batch")
        turns = {col: stop_and_resume(by[f"{col}_speedup"]) for col in ("predicted", "simulated", "measured")}
        found = {col: stop for col, (stop, _) in turns.items()}
        rows.append({"curve": name, "kind": kind, **{f"{k}_stops_at": v for k, v in found.items()},
                     "grid_steps": abs(index[found["predicted"]] - index[found["measured"]]),
                     "sim_grid_steps": abs(index[found["simulated"]] - index[found["measured"]]),
                     **{f"{k}_pays_again_at": again for k, (_, again) in turns.items()}})
    return pd.DataFrame(rows)


def best_k(fid: pd.DataFrame) -> pd.DataFrame:
    """Per method setup whose configurations differ in their draft length alone (gamma), at each batch:
    the draft length the prediction picks, the best measured one, and the pick's measured speedup over
    the best measured (`regret`; `within` WITHIN_K)."""
    rows = []
    spec = fid[fid["method"] != BASELINE].copy()
    spec["config"] = [methods.parse_label(c.split(" @")[0]) for c in spec["candidate"]]
    spec["gamma"] = [getattr(c, "gamma", None) for c in spec["config"]]
    spec["rest"] = [(c.method, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in c.to_dict().items()
                                     if k != "gamma"), cand.partition(" @")[2])       # a tree's or bins' list as a tuple
                    for c, cand in zip(spec["config"], spec["candidate"])]
    for _, group in spec[spec["gamma"].notna()].groupby("rest", sort=False):
        if group["gamma"].nunique() < 2:
            continue
        for batch, g in group.groupby("batch", sort=True):
            picked = g.loc[g["predicted_speedup"].idxmax()]
            best = g.loc[g["measured_speedup"].idxmax()]
            regret = 1.0 - picked["measured_speedup"] / best["measured_speedup"]
            rows.append({"setup": " / ".join(g["candidate"]), "batch": int(batch), "predicted_k": int(picked["gamma"]),
                         "measured_k": int(best["gamma"]), "picked_measured": picked["measured_speedup"],
                         "best_measured": best["measured_speedup"], "regret": regret, "within": regret <= WITHIN_K})
    return pd.DataFrame(rows)


def summary_lines(fid: pd.DataFrame) -> list[str]:
    """The batch section of the report's summary: errors over every (configuration, batch), how many
    are within twice their spread over repeats, per batch, and the crossovers and best K against targets."""
    spec = fid[fid["method"] != BASELINE]
    err = spec["rel_error"].abs()
    within = spec["rel_error"].abs() <= 2 * spec["spread"]
    lines = [f"- every (configuration, batch): closed form median |error| {100 * err.median():.1f}%, worst "
             f"{100 * err.max():.1f}% ({spec.loc[err.idxmax(), 'candidate']} at batch {int(spec.loc[err.idxmax(), 'batch'])}); "
             f"simulator median {100 * spec['sim_rel_error'].abs().median():.1f}%, worst "
             f"{100 * spec['sim_rel_error'].abs().max():.1f}%; within 2x the spread over repeats {int(within.sum())}/{len(spec)}"]
    for batch, g in spec.groupby("batch", sort=True):
        e = g["rel_error"].abs()
        lines.append(f"  - batch {int(batch)}: median {100 * e.median():.1f}%, worst {100 * e.max():.1f}%, flips "
                     f"{int(g['verdict_flip'].sum())}, paying (measured) {int((g['measured_speedup'] > PAYS).sum())}/{len(g)}")
    cross = crossovers(fid)
    lines.append(f"- crossover (smallest batch where it stops paying) within one grid step: "
                 f"{int((cross['grid_steps'] <= 1).sum())}/{len(cross)} (closed form), "
                 f"{int((cross['sim_grid_steps'] <= 1).sum())}/{len(cross)} (simulator)")
    k = best_k(fid)
    if len(k):
        lines.append(f"- best draft length per batch: the predicted pick measures within {100 * WITHIN_K:.0f}% of the best "
                     f"measured at {int(k['within'].sum())}/{len(k)} (setup, batch); worst regret {100 * k['regret'].max():.1f}%")
    return lines


def batch_sections(fid: pd.DataFrame, out: Path) -> list[str]:
    """crossover.csv and best_k.csv in `out`; the report's batch text: its summary lines (first
    element), then the crossover, best-K and per-batch tables."""
    cross, k = crossovers(fid), best_k(fid)
    atomic.write_csv(out / "crossover.csv", cross)
    atomic.write_csv(out / "best_k.csv", k)
    spec = fid[fid["method"] != BASELINE]
    table = spec.pivot_table(index="candidate", columns="batch", values=["predicted_speedup", "measured_speedup"],
                             sort=False)
    wide = pd.DataFrame({f"B{b}": [f"{p:.2f} / {m:.2f}" for p, m in zip(table["predicted_speedup"][b],
                                                                        table["measured_speedup"][b])]
                         for b in sorted(spec["batch"].unique())}, index=table.index).reset_index()
    sections = ["\n".join(summary_lines(fid)),
                "\n## Speedup over plain decoding at the same batch: predicted (closed form) / measured\n",
                md_table(wide, list(wide.columns), ".2f"),
                "\n## Where speculation stops paying (crossover.csv)\n",
                md_table(cross, list(cross.columns), ".0f"),
                "\nThe smallest batch of the grid at which a curve is at or below 1x (inf: it pays at every batch); "
                "grid_steps: how many batch sizes of the grid the prediction sits from the measurement; "
                "*_pays_again_at: a larger batch where the curve is above 1x again (a CPU's step turns with the "
                "kernels a row count takes)."]
    if len(k):
        sections += ["\n## Best draft length per batch (best_k.csv)\n", md_table(k, list(k.columns), ".3f")]
    return sections + [""]
