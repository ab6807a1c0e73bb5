"""One answer per deployment: the best configuration at each batch size, simulated in serving.

A *deployment* is what one engine serves: a target on one hardware, for one workload (dataset)
at one sampling temperature (`DEPLOYMENT`). Methods and drafters compete inside a deployment,
never across deployments (a 7B on an H800 and a 33B on an A6000 are different questions).

At each batch size B the sweep's closed forms, scored at B, name the best configuration of every
(method, drafter) of the deployment (`candidates`); each is then served by the discrete-event
simulator (`simulator.serving`) with `WAVES x B` requests arriving at once and batch limit B, so B
sequences decode together, beside plain decoding (ar) served the same way (`serve_task`).
`answers` keeps every simulated row with its throughput and latency against ar at that batch;
`best_per_batch` picks the fastest per (deployment, batch) and `stops_paying` the smallest batch
at which even the best speculative configuration serves no more tokens/s than plain decoding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from methods import BASELINE
from common.errors import InputError
from common.seeds import derive_seed
from experiments.sweep import scoring

DEPLOYMENT = ["profile", "target", "hardware", "dataset", "temperature"]
WAVES = 3                  # requests served per batch slot (B running, WAVES x B in all)
SERVED = ["throughput_tok_s", "tpot_ms", "ttft_ms", "e2e_s_p50", "e2e_s_p99", "oom", "not_served"]


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

    profile: dict[str, Any]
    method: str
    config: dict[str, Any]
    batch: int
    prompt_len: int
    output_len: int
    seed: int


def candidates(tables: dict[str, pd.DataFrame], hardware: dict[str, str], top: int = 1) -> pd.DataFrame:
    """The closed form's best `top` configurations per (deployment, method, drafter) of scored tables."""
    rows = []
    for frame in tables.values():
        if frame.empty:
            continue
        frame = frame.assign(hardware=frame["profile"].map(hardware))
        keys = DEPLOYMENT + ["method", "drafter"]
        rows.append(frame.sort_values("speedup", ascending=False, kind="stable").groupby(keys, sort=False).head(top))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def serve_tasks(cands: pd.DataFrame, profiles: dict[str, Any], batch: int, ctx_len: dict[str, float],
                output_len: int, seed: int) -> tuple[list[ServeTask], pd.DataFrame]:
    """Serving tasks for every candidate and, once per deployment, for plain decoding (ar); returns
    the tasks and the rows they belong to (candidates first, then one ar row per deployment)."""
    plain = cands.drop_duplicates(DEPLOYMENT)[DEPLOYMENT].assign(method=BASELINE, drafter="-", config=BASELINE,
                                                                  acceptance="-")
    rows = pd.concat([cands, plain], ignore_index=True)
    tasks = []
    for i in range(len(rows)):
        row = rows.iloc[[i]]
        name = str(row["profile"].iat[0])
        method = str(row["method"].iat[0])
        config = {} if method == BASELINE else scoring.sim_config(row)
        prompt = max(1, int(round(ctx_len[name])) - output_len // 2)   # centred on the scored context
        own = derive_seed(seed, "serve", name, method, sorted(config.items()), int(batch), prompt, output_len)
        tasks.append(ServeTask(profiles[name], method, config, int(batch), prompt, output_len, own))
    return tasks, rows


def serve_task(task: ServeTask) -> dict[str, float]:
    """Executor entry point: throughput and latency of one configuration served at `task.batch`."""
    from simulator.serving import Cluster, simulate_serving
    from simulator.workload import Workload

    workload = Workload(rate=1e9, n_requests=WAVES * task.batch, prompt_len=f"fixed:{task.prompt_len}",
                        output_len=f"fixed:{task.output_len}")
    try:
        s = simulate_serving(task.profile, task.method, task.config or None, workload,
                             Cluster(max_batch=task.batch), task.seed).summary
    except InputError as exc:       # e.g. the weights leave no KV memory on one GPU: not served, said why
        return {**{k: np.nan for k in SERVED if k != "not_served"}, "not_served": str(exc)}
    return {"throughput_tok_s": s["throughput_tok_s"], "tpot_ms": 1000 * s["tpot_s_mean"],
            "ttft_ms": 1000 * s["ttft_s_mean"], "e2e_s_p50": s["e2e_s_p50"], "e2e_s_p99": s["e2e_s_p99"],
            "oom": s["oom"], "not_served": ""}


def answers(rows: pd.DataFrame, served: list[dict[str, float]], batch: int,
            heldout: dict[str, float | None]) -> pd.DataFrame:
    """Simulated rows at one batch, each with its throughput against ar of its deployment and the
    verdict that the Profile's held-out error allows (`scoring.confidence`)."""
    out = pd.concat([rows.reset_index(drop=True), pd.DataFrame(served)], axis=1).assign(batch=int(batch))
    ar = out[out["method"] == BASELINE].set_index(DEPLOYMENT)["throughput_tok_s"].rename("ar_throughput_tok_s")
    out = out.join(ar, on=DEPLOYMENT)
    out["throughput_ratio"] = out["throughput_tok_s"] / out["ar_throughput_tok_s"]
    verdicts = [scoring.confidence(np.asarray([r]), heldout.get(p))["verdict"][0]
                for r, p in zip(out["throughput_ratio"], out["profile"])]
    out["serving_verdict"] = np.where(out["method"] == BASELINE, "-", verdicts)
    keep = DEPLOYMENT + ["batch", "method", "drafter", "config", "acceptance", "speedup", "heldout_error", "verdict"]
    return out[[c for c in keep if c in out] + SERVED + ["ar_throughput_tok_s", "throughput_ratio", "serving_verdict"]]


def best_per_batch(table: pd.DataFrame) -> pd.DataFrame:
    """Per (deployment, batch): the fastest speculative configuration that served without OOM, and
    the answer: that configuration where it serves more tokens/s than plain decoding, else BASELINE."""
    spec = table[(table["method"] != BASELINE) & (table["oom"] == 0)]
    best = spec.sort_values("throughput_tok_s", ascending=False, kind="stable").groupby(DEPLOYMENT + ["batch"]).head(1)
    plain = table[table["method"] == BASELINE][DEPLOYMENT + ["batch"]]
    merged = plain.merge(best, on=DEPLOYMENT + ["batch"], how="left")
    merged.insert(len(DEPLOYMENT) + 1, "answer",
                  np.where(merged["throughput_ratio"].fillna(0.0) > 1.0, merged["config"].fillna(BASELINE), BASELINE))
    return merged.sort_values(DEPLOYMENT + ["batch"], kind="stable").reset_index(drop=True)


def stops_paying(table: pd.DataFrame) -> pd.DataFrame:
    """Per deployment: the smallest batch at which the best speculative configuration serves no
    more tokens/s than plain decoding (NaN when it pays at every batch simulated)."""
    spec = table[(table["method"] != BASELINE) & (table["oom"] == 0)]
    best = spec.groupby(DEPLOYMENT + ["batch"])["throughput_ratio"].max().rename("best_ratio").reset_index()
    batches = table[table["method"] == BASELINE][DEPLOYMENT + ["batch"]].merge(best, how="left")
    batches["best_ratio"] = batches["best_ratio"].fillna(0.0)
    rows = []
    for key, group in batches.groupby(DEPLOYMENT, sort=False):
        worse = group.loc[group["best_ratio"] <= 1.0, "batch"]
        rows.append(dict(zip(DEPLOYMENT, key), stops_paying_at=float(worse.min()) if len(worse) else np.nan,
                         largest_batch=int(group["batch"].max())))
    return pd.DataFrame(rows, columns=DEPLOYMENT + ["stops_paying_at", "largest_batch"])
