"""One answer per deployment: what to run at each batch size, served by the simulator.

A *deployment* is what one engine serves: a target on one hardware, for one workload (dataset)
at one sampling temperature (`DEPLOYMENT`). Methods and drafters compete inside a deployment,
never across deployments (a 7B on an H800 and a 33B on an A6000 are different questions).

At each batch size B the sweep's closed forms, scored at B, name the best configuration of every
(method, drafter) of the deployment, those that fit in memory first, in the sweep's one order
(`candidates`, `sweep.ranking`); each is served by the discrete-event simulator
(`simulator.serving`) beside plain decoding (ar) under the one load every command serves a batch
size under (`simulator.batch_load`): WAVES x B requests of the deployment's prompt and the sweep's
answer length arrive together at t = 0 with batch limit B, so B sequences decode at once and the
others wait for a slot. Each served row keeps its throughput and latencies: TPOT; TTFT and end-to-end latency
under that load (the wait included); the wait itself (`queue_s_p50`), a request's own latency
once admitted (`latency_s_p50`, no queueing) and the latency of one request served alone at batch 1
(`alone_s`: no queueing, no batch; the median request's own latency under the batch-1 load, whose
requests are each served alone: one number per configuration at every batch, served once, `alone_once`)
and the largest batch it ran (`reached`). A row that cannot be served says why in words (`not_served`:
the memory arithmetic when the weights leave no KV memory, or the batch its KV memory reached when that
is below B: such a row is never an answer at B). A batch size no profile's KV memory could hold is
refused before the sweep (`check_batch_sizes`). A batch past the Profile's measured latency tables is
answered NOT_PRICED: a table is not extrapolated in batch (`profiles.latency`).

`best_per_batch` gives the answer per (deployment, batch): the fastest speculative configuration
served where it beats plain decoding, else ar, each with its own numbers and a `why`; candidates
within the Profile's held-out error of the fastest are named as ties (`tied_with`). Configurations on
ASSUMED acceptance (`calibrate.assumed`) are answers only where nothing measured was served; a faster
one is named in the `why` (`preferred`). `stops_paying` gives the smallest batch at which even the
best speculative configuration serves no more tokens/s than plain decoding.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

import methods
from methods import BASELINE
from common.errors import InputError
from sweep import ranking, scoring
from profiles import Profile
from calibrate.assumed import ASSUMED
from profiles.latency import PastMeasuredBatch
from simulator.batch_load import BatchLoad, serve_at_batch
from simulator.memory import memory_of

DEPLOYMENT = ["profile", "target", "hardware", "dataset", "temperature"]
CANDIDATE_KEYS = [c for c in DEPLOYMENT if c != "hardware"] + ["method", "drafter"]   # a profile has one hardware
SERVED = ["throughput_tok_s", "tpot_ms", "ttft_ms", "e2e_s_p50", "e2e_s_p99", "queue_s_p50", "latency_s_p50",
          "alone_s", "oom", "reached", "not_served"]
NOTHING_FITS = "nothing fits"      # the answer where plain decoding itself does not fit, or not the batch
NOT_PRICED = "not priced"          # the answer at a batch past the Profile's measured latency tables
NO_RUN = (NOTHING_FITS, NOT_PRICED)     # answers that name no configuration to run
PAYS = 1.0                         # speculation pays at a batch while it serves more than this x plain decoding
LATENCIES = ["tpot_ms", "ttft_ms", "e2e_s_p50", "queue_s_p50", "latency_s_p50", "alone_s"]
ANSWER_COLUMNS = ["answer", "method", "drafter", "config", "throughput_tok_s", "ar_throughput_tok_s",
                  "throughput_ratio", "serving_verdict", *LATENCIES, "best_speculative", "best_speculative_ratio",
                  "tied_with", "why"]


def parse_batch_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8] (sorted, unique); InputError naming the value and what is allowed."""
    sizes = []
    for item in str(text).split(","):
        item = item.strip()
        if not item.isdigit() or int(item) < 1:
            raise InputError(f"--batch-sizes: '{item}' in '{text}' is not a batch size (allowed: comma-separated "
                             "integers >= 1, e.g. 1,2,4,8)")
        sizes.append(int(item))
    return sorted(set(sizes))


@dataclass
class ServeTask:
    """One executor task: serve one configuration (or ar) at one batch size."""

    profile: Profile
    method: str
    config: dict[str, Any]
    batch: int
    load: BatchLoad
    seed: int
    alone: bool = True      # at batch > 1, also serve one request alone (`alone_s`); False where another task does

    @property
    def measures_alone(self) -> bool:
        """Whether serving this task gives its configuration's `alone_s` (the batch-1 load always does)."""
        return self.batch == 1 or self.alone


def candidates(tables: dict[str, pd.DataFrame], hardware: dict[str, str], top: int = 1) -> pd.DataFrame:
    """The closed form's best `top` configurations per candidate group (deployment, method, drafter:
    CANDIDATE_KEYS) of scored tables, in the sweep's one order (those that fit in memory first)."""
    return _with_hardware([ranking.best_of_table(frame, CANDIDATE_KEYS, top) for frame in tables.values()
                           if not frame.empty], hardware)


def candidates_of(best_rows: list[pd.DataFrame], hardware: dict[str, str]) -> pd.DataFrame:
    """`candidates` from the best row per candidate group of each (profile, method) scored
    (`sweep.spaces.best_per_group`): the same rows, in the same order (methods in the registry's)."""
    by_method: dict[str, list[pd.DataFrame]] = {}
    for frame in best_rows:
        if not frame.empty:
            by_method.setdefault(str(frame["method"].iloc[0]), []).append(frame)
    return _with_hardware([ranking.ranked(pd.concat(by_method[m], ignore_index=True), "speedup", CANDIDATE_KEYS)
                           for m in methods.names() if m in by_method], hardware)


def _with_hardware(frames: list[pd.DataFrame], hardware: dict[str, str]) -> pd.DataFrame:
    rows = [best.assign(hardware=best["profile"].map(hardware)) for best in frames]
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def serve_tasks(cands: pd.DataFrame, profiles: dict[str, Profile], batch: int, loads: dict[str, BatchLoad],
                seed: int, every: pd.DataFrame | None = None) -> tuple[list[ServeTask], pd.DataFrame]:
    """Serving tasks for every candidate and, once per deployment of `cands` and of `every` (the
    deployments to answer for, though no method was priced at this batch), for plain decoding (ar);
    returns the tasks and the rows they belong to (candidates first, then one ar row per deployment)."""
    deployed = pd.concat([c[DEPLOYMENT] for c in (cands, every) if c is not None and not c.empty], ignore_index=True)
    plain = deployed.drop_duplicates(DEPLOYMENT)[DEPLOYMENT].assign(method=BASELINE, drafter="-", config=BASELINE,
                                                                    acceptance="-")
    rows = pd.concat([cands, plain], ignore_index=True)
    tasks = []
    for i in range(len(rows)):
        row = rows.iloc[i:i + 1]      # a slice: no copy of the row
        name = str(row["profile"].iat[0])
        method = str(row["method"].iat[0])
        config = {} if method == BASELINE else scoring.sim_config(row)
        tasks.append(ServeTask(profiles[name], method, config, int(batch), loads[name], seed))
    return tasks, rows


def serve_task(task: ServeTask) -> dict[str, float]:
    """Executor entry point: throughput and latency of one configuration served at `task.batch`, and
    the largest batch it reached (`reached`): KV memory may hold fewer sequences than the batch limit,
    and a row that never ran `task.batch` at once is not served at that batch (`not_served` says so)."""
    def serve(batch: int, requests: int | None = None):
        return serve_at_batch(task.profile, task.method, task.config, batch, task.load, task.seed, requests=requests)

    try:
        run = serve(task.batch)
    except InputError as exc:       # no KV memory left by the weights, or a table measured below this batch: said why
        why = f"{NOT_PRICED}: {exc}" if isinstance(exc, PastMeasuredBatch) else str(exc)
        return {**{k: np.nan for k in SERVED if k != "not_served"}, "not_served": why}
    s, steps = run.summary, run.iterations
    reached = int(steps.loc[steps["kind"] == "decode", "batch"].max()) if (steps["kind"] == "decode").any() else 0
    if task.batch == 1:         # the batch-1 load serves each request alone
        alone = s["service_s_p50"]
    else:                       # the same run as the configuration's at batch 1 (its seed), served once
        alone = serve(1).summary["service_s_p50"] if task.alone else np.nan
    if s["oom"]:
        why = f"{s['oom']} of {s['requests']} requests ran out of KV memory"
    elif reached < task.batch:
        why = (f"reaches batch {reached} only: its KV memory holds {s['kv_capacity_tokens']:,} tokens, "
               f"{task.batch} sequences of {task.load.prompt_len} + {task.load.output_len} tokens do not fit at once")
    else:
        why = ""
    return {"throughput_tok_s": s["throughput_tok_s"], "tpot_ms": 1000 * s["tpot_s_mean"],
            "ttft_ms": 1000 * s["ttft_s_mean"], "e2e_s_p50": s["e2e_s_p50"], "e2e_s_p99": s["e2e_s_p99"],
            "queue_s_p50": s["queue_s_p50"], "latency_s_p50": s["service_s_p50"], "alone_s": alone, "oom": s["oom"],
            "reached": reached, "not_served": why}


def alone_once(tasks: list[ServeTask], known: dict[tuple, float]) -> list[ServeTask]:
    """`tasks` with `alone` left on for the first task (in order: the smallest batch first) of each
    configuration whose `alone_s` is not in `known` (from tasks served before, `alone_of`) and off for
    the rest: a configuration served at several batch sizes is served alone once, and shows one number."""
    seen = set(known)
    out = []
    for task in tasks:
        key = _alone_key(task)
        out.append(task if task.batch == 1 or key not in seen else replace(task, alone=False))
        seen.add(key)
    return out


def alone_of(tasks: list[ServeTask], served: list[dict[str, Any]], known: dict[tuple, float]) -> list[dict[str, Any]]:
    """`served` (the results of `tasks`) with each row that a task served without `alone` given the
    `alone_s` of its configuration from the task that served it alone, or from `known`, which gains
    every `alone_s` served here."""
    for task, row in zip(tasks, served):
        if task.measures_alone and np.isfinite(row["alone_s"]):
            known.setdefault(_alone_key(task), row["alone_s"])
    return [{**row, "alone_s": known.get(_alone_key(task), np.nan)}
            if not task.measures_alone and np.isfinite(row["throughput_tok_s"]) else row
            for task, row in zip(tasks, served)]


def _alone_key(task: ServeTask) -> tuple:
    """What one request served alone depends on: the profile, the configuration, the load and the seed."""
    return task.profile.name, task.method, repr(sorted(task.config.items())), task.load, task.seed


def load_of(ctx_len: float, output_len: int) -> BatchLoad:
    """The load of a deployment: `output_len`-token answers to prompts that centre each request's
    context on the scored one."""
    return BatchLoad(prompt_len=scoring.centred_prompt(round(ctx_len), output_len), output_len=int(output_len))


def loads_of(profiles: list[Profile], output_len: int, ctx_len) -> dict[str, BatchLoad]:
    """Each profile's load (`load_of`) from its scored context `ctx_len(profile)`."""
    return {p.name: load_of(ctx_len(p), output_len) for p in profiles}


def check_batch_sizes(profiles: list[Profile], sizes: list[int], loads: dict[str, BatchLoad]) -> None:
    """InputError when a batch size exceeds what plain decoding's KV memory admits at once on every
    profile (each sequence holds its prompt and a token at least): the simulator would serve fewer
    sequences and call it that batch. A batch some profile reaches is served; rows that do not reach
    it say so (`serve_task`)."""
    most = {}
    for profile in profiles:
        prompt = loads[profile.name].prompt_len
        most[profile.name] = (memory_of(profile).capacity_tokens // (prompt + 1), prompt)
    beyond = [b for b in sizes if all(b > m for m, _ in most.values())]
    if beyond:
        held = "; ".join(f"{name}: at most {m:,} sequences of a {p}-token prompt and one token" for name, (m, p) in most.items())
        raise InputError(f"--batch-sizes: {beyond[0]:,} sequences at once fit in no profile's KV memory ({held}); "
                         f"give batch sizes up to {max(m for m, _ in most.values()):,}")


def answers(rows: pd.DataFrame, served: list[dict[str, float]], batch: int, loads: dict[str, BatchLoad],
            profiles: dict[str, Profile]) -> pd.DataFrame:
    """Simulated rows at one batch, each with its throughput against ar of its deployment, the
    verdict that its Profile's held-out error allows (`scoring.confidence`) and where that error was
    measured when the Profile was moved to other hardware."""
    out = pd.concat([rows.reset_index(drop=True), pd.DataFrame(served)], axis=1).assign(batch=int(batch))
    ar = out[out["method"] == BASELINE].set_index(DEPLOYMENT)["throughput_tok_s"].rename("ar_throughput_tok_s")
    out = out.join(ar, on=DEPLOYMENT)
    out["throughput_ratio"] = out["throughput_tok_s"] / out["ar_throughput_tok_s"]
    heldout = {name: p.heldout_error() for name, p in profiles.items()}
    out["heldout_error"] = out["profile"].map(lambda p: np.nan if heldout[p] is None else heldout[p])
    moved = out["profile"].map({name: p.provenance.moved_from for name, p in profiles.items()})
    verdicts = [scoring.confidence(np.asarray([r]), heldout[p])["verdict"][0]
                for r, p in zip(out["throughput_ratio"], out["profile"])]
    out["serving_verdict"] = np.where(out["method"] == BASELINE, "-",
                                      np.where(out["not_served"] != "", scoring.DOES_NOT_FIT, verdicts))
    out["arrivals"] = out["profile"].map(lambda p: loads[p].describe(batch))
    keep = DEPLOYMENT + ["batch", "method", "drafter", "config", "acceptance", "acceptance_source", "speedup",
                         "heldout_error", "verdict"]
    columns = [c for c in keep if c in out] + SERVED + ["ar_throughput_tok_s", "throughput_ratio", "serving_verdict",
                                                        "arrivals"]
    if moved.astype(bool).any():     # a Profile moved to other hardware: its error was measured on the first
        out["heldout_fitted_on"] = moved
        columns.append("heldout_fitted_on")
    return out[columns]


def _served(table: pd.DataFrame) -> pd.Series:
    """Rows the simulator served to the end (no request out of memory, nothing refused)."""
    refused = table["not_served"].fillna("").astype(str) != "" if "not_served" in table else False
    return (table["oom"] == 0) & ~refused


def _answer(group: pd.DataFrame) -> dict[str, Any]:
    """The answer of one (deployment, batch): its configuration, its own numbers and why."""
    plain = group[group["method"] == BASELINE].iloc[0]
    spec = group[group["method"] != BASELINE]
    ran = ranking.ranked(spec[_served(spec)], "throughput_tok_s")
    kept = preferred(ran)
    unmeasured, ran = ran[~kept].head(1), ran[kept]
    refused = spec[~_served(spec)]
    error = float(group["heldout_error"].max()) if "heldout_error" in group else np.nan
    notes = [f"{_named(r)} {_refusal(r['not_served'])}" for _, r in refused.iterrows()] if "not_served" in spec else []
    out: dict[str, Any] = {"best_speculative": "", "best_speculative_ratio": np.nan, "tied_with": ""}
    if str(plain.get("not_served", "")).startswith(NOT_PRICED):
        return _no_run(out, NOT_PRICED, str(plain["not_served"]).removeprefix(f"{NOT_PRICED}: "), "-")
    if not _served(group[group["method"] == BASELINE]).iat[0]:
        refusal = _refusal(plain.get('not_served', ''))
        why = (f"plain decoding {refusal}; no configuration runs "
               + ("on one GPU" if refusal.startswith("does not fit") else f"batch {int(plain['batch'])} on one GPU"))
        return _no_run(out, NOTHING_FITS, why, scoring.DOES_NOT_FIT)
    if len(ran):
        best = ran.iloc[0]
        tied = ran.iloc[1:][ranking.within_error(ran["throughput_tok_s"].iloc[1:], best["throughput_tok_s"], error)]
        out.update(best_speculative=best["config"], best_speculative_ratio=float(best["throughput_ratio"]),
                   tied_with=", ".join(_named(r) for _, r in tied.iterrows()))
    pays = len(ran) and float(ran["throughput_ratio"].iat[0]) > PAYS
    chosen = ran.iloc[0] if pays else plain
    fitted_on = str(plain.get("heldout_fitted_on", "") or "")
    err = ("" if error != error else f" (the Profile's held-out error is {error:.1%})" if not fitted_on else
           f" (the held-out error of its {fitted_on} fit, {error:.1%}: not measured on {plain['hardware']})")
    if pays:
        verdict = str(chosen["serving_verdict"])
        why = (f"serves {chosen['throughput_ratio']:.2f}x plain decoding's tokens/s"
               + {"speculate": ", a gain beyond the model's error" + err,
                  "tie": ", within the model's error" + err + ": a tie with plain decoding"}.get(verdict, ""))
    elif len(ran):
        why = (f"the fastest speculative configuration, {ran['config'].iat[0]}, serves "
               f"{ran['throughput_ratio'].iat[0]:.2f}x plain decoding's tokens/s"
               + {"tie": ", within the model's error" + err + ": a tie, and plain decoding is the simpler to run",
                  "don't": ", a loss beyond the model's error" + err}.get(str(ran["serving_verdict"].iat[0]), ""))
    else:
        why = "no speculative configuration runs"
    if pays and chosen.get("acceptance_source") == ASSUMED:
        why += "; its acceptance is ASSUMED, carried from another target (the report's Assumed acceptance)"
    for _, other in unmeasured.iterrows():
        if other["throughput_tok_s"] > chosen["throughput_tok_s"]:
            why += (f"; {_named(other)} would serve {other['throughput_ratio']:.2f}x on ASSUMED acceptance, which "
                    "no one measured on this target: measure it before running it")
    if out["tied_with"]:
        why += f"; tied within the error with {out['tied_with']}"
    if notes:
        why += (": " if not len(ran) else "; ") + "; ".join(notes)
    return {**out, "answer": chosen["config"], "method": chosen["method"], "drafter": chosen["drafter"],
            "config": chosen["config"], "throughput_tok_s": chosen["throughput_tok_s"],
            "ar_throughput_tok_s": plain["throughput_tok_s"],
            "throughput_ratio": chosen["throughput_tok_s"] / plain["throughput_tok_s"],
            "serving_verdict": chosen["serving_verdict"] if pays else "-", "why": why,
            **{k: chosen.get(k, np.nan) for k in LATENCIES}}


def _no_run(out: dict[str, Any], answer: str, why: str, verdict: str) -> dict[str, Any]:
    """An answer that names no configuration (NO_RUN): `answer`, why, and no throughput."""
    return {**out, "answer": answer, "method": "", "drafter": "", "config": "", "why": why,
            **{k: np.nan for k in ("throughput_tok_s", "ar_throughput_tok_s", "throughput_ratio")},
            "serving_verdict": verdict}


def preferred(spec: pd.DataFrame) -> pd.Series:
    """Which speculative rows an answer is chosen from: those on recorded acceptance, and the ASSUMED
    ones (`calibrate.assumed`) of a (deployment, batch) that has nothing recorded."""
    if "acceptance_source" not in spec or spec.empty:
        return pd.Series(True, index=spec.index)
    assumed = spec["acceptance_source"] == ASSUMED
    recorded = (~assumed).groupby([spec[c] for c in DEPLOYMENT + ["batch"]]).transform("any")
    return ~assumed | ~recorded


def _named(row: pd.Series) -> str:
    """A served configuration with its drafter (two drafters may run the same configuration)."""
    drafter = str(row.get("drafter", "-"))
    return str(row["config"]) if drafter in ("-", "", "nan") else f"{row['config']} (drafter {drafter})"


def _refusal(text: str) -> str:
    """A `not_served` reason as it reads after a configuration's name."""
    text = str(text)
    return text if text.startswith("does not fit") else f"was not served: {text}"


def best_per_batch(table: pd.DataFrame) -> pd.DataFrame:
    """Per (deployment, batch): the answer (ANSWER_COLUMNS), the load it was served under."""
    rows = []
    for key, group in table.groupby(DEPLOYMENT + ["batch"], sort=True):
        row = dict(zip(DEPLOYMENT + ["batch"], key))
        rows.append({**row, **_answer(group), "arrivals": group["arrivals"].iloc[0]})
    return pd.DataFrame(rows, columns=DEPLOYMENT + ["batch"] + ANSWER_COLUMNS + ["arrivals"])


def stop_and_resume(ratios: pd.Series) -> tuple[float, float]:
    """(the smallest batch at which a speedup curve, indexed by batch, is at or below PAYS, inf where it
    pays at every batch; the smallest larger batch at which it pays again, NaN where none): on a CPU a
    curve turns with the kernels a row count takes, and a draft model that loses at batch 4 may pay at 8."""
    ratios = ratios.sort_index()
    below = ratios.index[ratios.to_numpy() <= PAYS]
    if not len(below):
        return math.inf, np.nan
    again = ratios.index[(ratios.index > below.min()) & (ratios.to_numpy() > PAYS)]
    return float(below.min()), float(again.min()) if len(again) else np.nan


def stops_paying(table: pd.DataFrame) -> pd.DataFrame:
    """Per deployment: the smallest batch at which the best speculative configuration serves no
    more tokens/s than plain decoding (NaN when it pays at every batch simulated, or when plain
    decoding itself was served at none: `runs` False), and the smallest larger batch where it pays
    again (`pays_again_at`, NaN where none)."""
    spec = table[(table["method"] != BASELINE) & _served(table)]
    spec = spec[preferred(spec)]
    best = spec.groupby(DEPLOYMENT + ["batch"])["throughput_ratio"].max().rename("best_ratio").reset_index()
    plain = table[table["method"] == BASELINE]
    batches = plain[_served(plain)][DEPLOYMENT + ["batch"]].merge(best, how="left")
    batches["best_ratio"] = batches["best_ratio"].fillna(0.0)
    rows = []
    for key, group in plain.groupby(DEPLOYMENT, sort=False):
        ran = batches.merge(group[DEPLOYMENT + ["batch"]], how="inner")
        stop, again = stop_and_resume(ran.set_index("batch")["best_ratio"])
        rows.append(dict(zip(DEPLOYMENT, key), stops_paying_at=stop if stop < math.inf else np.nan,
                         pays_again_at=again, largest_batch=int((ran if len(ran) else group)["batch"].max()),
                         runs=bool(len(ran))))
    return pd.DataFrame(rows, columns=DEPLOYMENT + ["stops_paying_at", "pays_again_at", "largest_batch", "runs"])
