"""A served load, priced by the simulator before the engine serves it (`python -m experiments.serve_load`).

A fixed request mix (seeded: each request a held-out prompt and an output length) arrives as a Poisson
process (or at the times of an arrival trace) at a few rates, set as multiples of the capacity the
simulator predicts for plain decoding (`capacity`: the mix served all at once, requests per second).
For each rate and configuration the simulator (`simulator.serving`, the Profile's padded batch engine,
the loop's max batch and KV budget) predicts per request TTFT, TPOT and end-to-end (`predict_load`,
written first); then `traces.serve` serves the same arrivals on the continuous-batching engine
(`measure_load`). Both tables are summarised the same way (`summarise`) and set side by side
(`compare_loads`), with the KV memory each method held and how far each measured quantile moves with
which requests the load happened to hold (`request_spread`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

import methods
from campaigns.measure import Bench, Candidate
from common.errors import InputError
from common.seeds import derive_seed
from fidelity.batch import check_cache_budget
from methods import BASELINE
from runtime.engine.batch import kv_bytes_per_token
from simulator import Cluster, Workload, simulate_serving
from simulator.leaning import profile_spread
from simulator.methods import build_step_model
from simulator.workload import make_requests
from traces.serve import Arrival, Limits, serve

MULTIPLES = (0.3, 0.9, 1.5)          # light, near capacity, overload: of plain decoding's predicted capacity
QUANTILES = {"p50": 0.5, "p90": 0.9}
METRICS = ("throughput_tok_s", "ttft_s_p50", "ttft_s_p90", "tpot_s_p50", "tpot_s_p90", "e2e_s_p50", "e2e_s_p90")
PER_REQUEST = tuple(m for m in METRICS if m != "throughput_tok_s")    # quantiles over requests: resampled
BOOTSTRAP_DRAWS = 2000


def parse_rates(text: str) -> list[tuple[str, float]]:
    """'x0.3,x0.9,x1.5' (multiples of plain decoding's predicted capacity) or '0.2,0.5' (requests/s)
    -> [(kind, value)]: kind 'x' or 'rate'; every value > 0, else one line."""
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        kind, number = ("x", item[1:]) if item.startswith("x") else ("rate", item)
        try:
            value = float(number)
        except ValueError:
            raise InputError(f"--rates: '{item}' is not a number of requests/s or xMULTIPLE") from None
        if not (np.isfinite(value) and value > 0):
            raise InputError(f"--rates: arrival rates must be > 0, got '{item}'")
        out.append((kind, value))
    if not out:
        raise InputError(f"--rates names no rate: '{text}'")
    return out


def read_arrival_trace(path) -> np.ndarray:
    """Arrival times (seconds, column arrival_s) of a CSV, in its order; refused where they go backwards."""
    if not Path(path).is_file():
        raise InputError(f"--arrival-trace not found: {path}")
    frame = pd.read_csv(path)
    if "arrival_s" not in frame:
        raise InputError(f"--arrival-trace {path} has no column arrival_s")
    times = pd.to_numeric(frame["arrival_s"], errors="coerce").to_numpy(float)
    if np.isnan(times).any() or (times < 0).any():
        raise InputError(f"--arrival-trace {path}: arrival_s must hold numbers >= 0")
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        raise InputError(f"--arrival-trace {path}: arrival times go backwards at row {int(back[0]) + 1} "
                         f"({times[back[0] + 1]:g} s after {times[back[0]]:g} s)")
    return times


def request_mix(prompts: list[tuple[str, list[int]]], n: int, output_lens: list[int], seed: int) -> pd.DataFrame:
    """`n` requests, each a prompt of `prompts` (prompt id, token ids) and an output length of
    `output_lens`, drawn with a seeded generator: one fixed mix for every rate and configuration."""
    rng = np.random.default_rng(derive_seed(seed, "request mix"))
    pick = rng.integers(0, len(prompts), n)
    return pd.DataFrame({"request_id": [f"r{i}" for i in range(n)], "prompt_id": [prompts[i][0] for i in pick],
                         "prompt_len": [len(prompts[i][1]) for i in pick],
                         "output_len": rng.choice(np.asarray(output_lens, np.int64), n)})


def poisson_arrivals(n: int, rate: float, seed: int) -> np.ndarray:
    """`n` Poisson arrival times at `rate` requests/s (`simulator.workload`, seeded)."""
    return make_requests(Workload(rate=rate, n_requests=n, arrival="poisson"), derive_seed(seed, "arrivals", rate))[
        "arrival_s"].to_numpy(float)


def sim_config(cand: Candidate, dataset: str | None = None) -> dict:
    """The simulator's configuration of `cand`: its method's settings, its drafter and the dataset
    whose acceptance prices the requests (None: the Profile's first, MT-Bench where it has one)."""
    return {**cand.config.to_dict(), **({"drafter": cand.drafter} if cand.drafter else {}),
            **({"dataset": dataset} if dataset else {})}


def _simulate(profile, cand: Candidate, load: pd.DataFrame, max_batch: int, kv_tokens: int, seed: int,
              dataset: str | None = None, per_step: bool = False):
    """The simulator serving `load` (its arrivals) with `cand` under the loop's limits, each request
    drafting at its own level as the Profile's prompt spread says (`simulator.leaning`; a ServingResult)."""
    return simulate_serving(profile, cand.method, sim_config(cand, dataset),
                            Workload(arrival="trace", trace=load[["arrival_s", "prompt_len", "output_len"]],
                                     **profile_spread(profile, dataset, cand.method)),
                            Cluster(max_batch=max_batch, kv_tokens=kv_tokens), seed, per_step=per_step)


def _repeat_seed(seed: int, cand: Candidate, repeat: int) -> int:
    """The seed of a configuration's `repeat`-th simulated run of a load."""
    return derive_seed(seed, "serve", cand.label, repeat)


def capacity(profile, mix: pd.DataFrame, max_batch: int, kv_tokens: int, seed: int) -> float:
    """Requests/s plain decoding serves when the whole mix arrives at once (the simulator's)."""
    plain = Candidate(methods.get(BASELINE).config())
    served = _simulate(profile, plain, mix.assign(arrival_s=0.0), max_batch, kv_tokens, seed).requests
    return float((served["status"] == "done").sum() / served["finish_s"].max())


def summarise(requests: pd.DataFrame) -> dict[str, float]:
    """Throughput (tokens of completed requests over the first arrival to the last finish) and the
    p50 / p90 of TTFT, TPOT and end-to-end over completed requests; counts of oom and preemptions.
    One definition for the simulator's requests and the loop's (`traces.serve`)."""
    done = requests[requests["status"] == "done"]
    span = float(requests["finish_s"].max() - requests["arrival_s"].min())
    out = {"requests": len(requests), "completed": len(done), "oom": int((requests["status"] == "oom").sum()),
           "preemptions": int(requests["preemptions"].sum()), "throughput_tok_s": float(done["generated"].sum()) / span}
    for metric in ("ttft_s", "tpot_s", "e2e_s"):
        for name, q in QUANTILES.items():
            out[f"{metric}_{name}"] = float(np.quantile(done[metric], q)) if len(done) else float("nan")
    return out


def request_spread(requests: pd.DataFrame, seed: int, draws: int = BOOTSTRAP_DRAWS) -> pd.DataFrame:
    """Per (load, candidate) of served `requests`: each quantile metric's relative standard
    deviation over `draws` resamples of its completed requests (with replacement, seeded), as
    `{metric}_spread`. A quantile of a few dozen requests moves with which of them a load held (a
    TPOT p50 sits between requests that waited on another's prefill and requests that did not); an
    error inside twice this spread is not one the load can show. Throughput, a rate over the whole
    span, has none."""
    rows = []
    for (name, label), group in requests.groupby(["load", "candidate"], sort=False):
        done = group[group["status"] == "done"]
        row = {"load": name, "candidate": label, **{f"{metric}_spread": np.nan for metric in PER_REQUEST}}
        if len(done) >= 2:
            rng = np.random.default_rng(derive_seed(seed, "bootstrap", str(name), str(label)))
            picks = rng.integers(0, len(done), size=(draws, len(done)))
            for metric in PER_REQUEST:
                base, q = metric.rsplit("_", 1)
                values = done[base].to_numpy(float)
                resampled = np.quantile(values[picks], QUANTILES[q], axis=1)
                row[f"{metric}_spread"] = float(np.std(resampled) / np.quantile(values, QUANTILES[q]))
        rows.append(row)
    return pd.DataFrame(rows)


def requests_to_resolve(spread: float, requests: int, limit: float) -> float:
    """Requests a load needs for twice its spread (shrinking as 1/sqrt(requests)) to fit inside `limit`."""
    return float(np.ceil(requests * (2.0 * spread / limit) ** 2)) if spread == spread else float("nan")


def predict_load(profile, cand: Candidate, load: pd.DataFrame, max_batch: int, kv_tokens: int, seed: int,
                 repeats: int, dataset: str) -> dict[str, float]:
    """The simulator's summary of `load` on `dataset`'s acceptance: its requests over `repeats` seeds
    pooled for the quantiles, the throughput their mean."""
    runs = [_simulate(profile, cand, load, max_batch, kv_tokens, _repeat_seed(seed, cand, r), dataset).requests
            for r in range(repeats)]
    pooled = summarise(pd.concat(runs, ignore_index=True))
    pooled["throughput_tok_s"] = float(np.mean([summarise(r)["throughput_tok_s"] for r in runs]))
    for key in ("requests", "completed", "oom", "preemptions"):
        pooled[key] = float(np.mean([summarise(r)[key] for r in runs]))
    return pooled


def step_costs(profile, cands: list[Candidate], runs: list[tuple[str, float, pd.DataFrame]], steps: pd.DataFrame,
               max_batch: int, kv_tokens: int, seed: int, dataset: str) -> pd.DataFrame:
    """Where a served load's time goes, simulated against measured, per (load, configuration): the median
    decode step by the rows it ran (1, 2, 3-4, 5-8, ...) and the prefill per admitted request. The simulator
    serves each load once (its first seed, as `predict_load`'s first run), per step; `steps` are the
    loop's (`traces.serve`: rows, draft/verify/overhead and prefill seconds, requests joined)."""
    edges = [0] + [2 ** i for i in range(int(np.ceil(np.log2(max(max_batch, 1)))) + 1)]
    names = [str(hi) if hi - lo == 1 else f"{lo + 1}-{hi}" for lo, hi in zip(edges, edges[1:])]
    out = []
    for name, rate, load in runs:
        for cand in cands:
            simulated = _simulate(profile, cand, load, max_batch, kv_tokens, _repeat_seed(seed, cand, 0), dataset,
                                  per_step=True).iterations
            measured = steps[(steps["load"] == name) & (steps["candidate"] == cand.label)]
            decode = simulated[simulated["kind"] == "decode"]
            sim_rows = pd.cut(decode["batch"], edges, labels=names)
            loop_rows = pd.cut(measured["rows"], edges, labels=names)
            loop_s = measured["draft_s"] + measured["verify_s"] + measured["overhead_s"]
            tag = {"load": name, "rate": rate, "candidate": cand.label}
            for rows in names:
                sim, loop = decode["seconds"][sim_rows == rows], loop_s[loop_rows == rows]
                out.append({**tag, "what": f"decode step, {rows} row(s)", "n_predicted": len(sim), "n_measured": len(loop),
                            "seconds_predicted": float(sim.median()) if len(sim) else np.nan,
                            "seconds_measured": float(loop.median()) if len(loop) else np.nan})
            prefills = simulated[simulated["kind"] == "prefill"]
            out.append({**tag, "what": "prefill, per request admitted", "n_predicted": int(prefills["batch"].sum()),
                        "n_measured": int(measured["joined"].sum()),
                        "seconds_predicted": float(prefills["seconds"].sum() / max(prefills["batch"].sum(), 1)),
                        "seconds_measured": float(measured["prefill_s"].sum() / max(measured["joined"].sum(), 1))})
    table = pd.DataFrame(out)
    return table.assign(rel_error=table["seconds_predicted"] / table["seconds_measured"] - 1.0)


def measure_load(bench: Bench, cand: Candidate, load: pd.DataFrame, ids: dict[str, list[int]], max_batch: int,
                 kv_tokens: int, reserve: int, context: int):
    """`traces.serve` of `load` (its prompts' token ids in `ids`) on the engine of `cand` (a `Served`)."""
    arrivals = [Arrival(r.request_id, float(r.arrival_s), tuple(ids[r.prompt_id]), int(r.output_len))
                for r in load.itertuples()]
    return serve(bench.batch_engine(cand, max_batch, context), arrivals, Limits(kv_tokens, reserve))


def measured_run(run: Path) -> tuple[list[tuple[str, float, pd.DataFrame]], list[str], pd.DataFrame]:
    """What a finished served run (`--out` of `experiments.serve_load`) measured, to be priced again:
    (name, rate, requests with their arrivals) per load, as served; the configurations' labels; and
    per (load, configuration) the measured summary and KV memory (served.csv's `_measured` columns)."""
    requests_csv, served_csv = Path(run) / "requests.csv", Path(run) / "served.csv"
    for path in (requests_csv, served_csv, Path(run) / "steps.csv"):
        if not path.is_file():
            raise InputError(f"--repredict {run}: no {path.name} (not a finished served run)")
    requests, served = pd.read_csv(requests_csv), pd.read_csv(served_csv)
    loads = []
    for (name, rate), rows in requests.groupby(["load", "rate"], sort=False):
        first = rows[rows["candidate"] == rows["candidate"].iloc[0]]
        arrivals = first[["request_id", "arrival_s", "prompt_len", "output_len"]].reset_index(drop=True)
        for label, other in rows.groupby("candidate", sort=False):
            same = other[["request_id", "arrival_s", "prompt_len", "output_len"]].reset_index(drop=True)
            if not same.equals(arrivals):
                raise InputError(f"--repredict {run}: load {name} served '{label}' other requests or arrivals than "
                                 f"'{first['candidate'].iloc[0]}'; one load is one request stream")
        loads.append((str(name), float(rate), arrivals))
    keep = {c: c[: -len("_measured")] for c in served.columns if c.endswith("_measured")}
    measured = served[["load", "rate", "candidate", *keep, *[c for c in served.columns if c.startswith("kv_")]]]
    return loads, list(dict.fromkeys(served["candidate"])), measured.rename(columns=keep)


def compare_loads(predicted: pd.DataFrame, measured: pd.DataFrame, spread: pd.DataFrame) -> pd.DataFrame:
    """Per (rate, configuration): each metric predicted and measured, the relative error, the measured
    quantile's spread over its requests (`request_spread`) and whether the error lies within twice it."""
    keys = ["load", "rate", "candidate"]
    both = predicted.merge(measured, on=keys, suffixes=("_predicted", "_measured"))
    both = both.merge(spread, on=["load", "candidate"], how="left")
    for metric in METRICS:
        both[f"{metric}_rel_error"] = both[f"{metric}_predicted"] / both[f"{metric}_measured"] - 1.0
    for metric in PER_REQUEST:
        both[f"{metric}_within_2x_spread"] = both[f"{metric}_rel_error"].abs() <= 2.0 * both[f"{metric}_spread"]
    order = keys + [f"{m}_{s}" for m in METRICS for s in ("predicted", "measured", "rel_error", "spread",
                                                          "within_2x_spread") if f"{m}_{s}" in both]
    return both[order + [c for c in both.columns if c not in order]]


def kv_held(bench: Bench, cand: Candidate, steps: pd.DataFrame) -> dict[str, float]:
    """The KV memory a served run held: vLLM's accounting (every running row's context plus its reserved
    slots, target and drafter bytes per token) at its mean and peak, and what the engine's padded
    caches allocated at their peak, in MiB."""
    modules = [bench.target.model]
    drafter = bench._drafter_argument(cand)
    if drafter is not None and not isinstance(drafter, str):
        modules.append(drafter)
    per_token = sum(kv_bytes_per_token(m) for m in modules)
    return {"kv_bytes_per_token": per_token, "kv_held_tokens_mean": float(steps["held_tokens"].mean()),
            "kv_held_tokens_max": float(steps["held_tokens"].max()),
            "kv_held_mib_max": float(steps["held_tokens"].max() * per_token / 2 ** 20),
            "kv_allocated_mib_max": float(steps["allocated_bytes"].max() / 2 ** 20)}


def make_loads(mix: pd.DataFrame, plain_capacity: float, rates: str, arrival_trace: Path | None,
               seed: int) -> list[tuple[str, float, pd.DataFrame]]:
    """(name, rate, the mix with its arrival times) per load: Poisson arrivals at each of `rates`
    (`parse_rates`; xM: M times `plain_capacity`), or the times of `arrival_trace` (one load)."""
    if arrival_trace is not None:
        times = read_arrival_trace(arrival_trace)
        if len(times) < len(mix):
            raise InputError(f"--arrival-trace holds {len(times)} arrivals for {len(mix)} requests")
        return [("trace", len(mix) / max(float(times[len(mix) - 1]), 1e-9), mix.assign(arrival_s=times[: len(mix)]))]
    out = []
    for kind, value in parse_rates(rates):
        rate = value * plain_capacity if kind == "x" else value
        name = f"x{value:g}" if kind == "x" else f"{value:g}/s"
        out.append((name, rate, mix.assign(arrival_s=poisson_arrivals(len(mix), rate, seed))))
    return out


def check_requests(bench: Bench, cands: list[Candidate], encoded: dict[str, list[int]], output_lens: list[int],
                   max_batch: int, context: int) -> None:
    """Refuse, before anything is written, a prompt that with the longest output passes `context`, and
    a max batch whose KV caches at `context` tokens a row exceed the memory available."""
    too_long = [pid for pid, ids in encoded.items() if len(ids) + max(output_lens) > context]
    if too_long:
        raise InputError(f"prompt {too_long[0]} ({len(encoded[too_long[0]])} tokens) and {max(output_lens)} new tokens "
                         f"exceed --context {context}")
    check_cache_budget(bench, cands, [max_batch], context)


def serve_loads(bench: Bench, cands: list[Candidate], runs: list[tuple[str, float, pd.DataFrame]],
                encoded: dict[str, list[int]], profile, max_batch: int, kv_tokens: int, context: int,
                log: Callable[[str], None]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every load served by every configuration on the engine (the order alternating from load to load,
    each engine warmed up once, untimed, first): (per load and configuration its `summarise` and
    `kv_held`; every request; every step)."""
    first = list(encoded.values())[:2]
    for cand in cands:                                          # warm-up, untimed
        bench.batch_engine(cand, min(2, max_batch), context).generate(first, 4)
    measured, requests, steps = [], [], []
    for i, (name, rate, load) in enumerate(runs):
        for cand in cands if i % 2 == 0 else cands[::-1]:
            reserve = build_step_model(profile, cand.method, sim_config(cand)).reserve_tokens
            served = measure_load(bench, cand, load, encoded, max_batch, kv_tokens, reserve, context)
            tag = {"load": name, "rate": rate, "candidate": cand.label}
            measured.append({**tag, **summarise(served.requests), **kv_held(bench, cand, served.steps)})
            requests.append(served.requests.assign(**tag))
            steps.append(served.steps.assign(**tag))
            log(f"{name} ({rate:.3f}/s) {cand.label}: {measured[-1]['throughput_tok_s']:.1f} tok/s, "
                f"TTFT p50 {measured[-1]['ttft_s_p50']:.2f} s, TPOT p50 {1e3 * measured[-1]['tpot_s_p50']:.1f} ms")
    return pd.DataFrame(measured), pd.concat(requests, ignore_index=True), pd.concat(steps, ignore_index=True)
