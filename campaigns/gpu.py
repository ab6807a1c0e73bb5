"""The GPU calibration campaign (the library of `python -m experiments.gpu_campaign`): the
architectures and drafters it times, the replayed loops it runs, and the fidelity table that prices
their steps from the latency profiles alone.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

import methods
from calibrate.fit_acceptance import conf_bin_table
from calibrate.latency import fit_latency
from profiles.profile import Profile
from costmodel.step import step_cost
from methods import MethodConfig, Setup
from methods.spec import drafter_fixed, engine_config, priced_config
from traces import schema
from common.errors import InputError
from runtime.models import random_architecture, tiny_model, truncated
from traces.drafter_timing import drafter_entries
from traces.replayed import (replayed_decoder, run_replayed, steps_frame)
from costmodel.hardware import dtype_bytes, get_hardware
from costmodel.params import forward_params, get_arch, kv_bytes_per_token

GPU_ARCHITECTURES = ("vicuna-7b", "vicuna-13b", "vicuna-33b", "llama-68m", "llama-160m", "mistral-7b",
                     "llama-3-8b", "qwen2.5-7b")
DRAFTER_ARCHITECTURES = ("vicuna-7b", "llama-3-8b", "qwen2.5-7b")   # 32k, 128k and 152k vocabularies
ROUTED_ARCHITECTURES = ("llama-3-8b", "qwen2.5-7b")                 # whose LM-head routers are timed too
BASELINE = methods.get(methods.BASELINE).config()
# every speculative method's own campaign configurations (`spec.campaign`)
CONFIGS: list[MethodConfig] = [c for spec in methods.specs() for c in spec.campaign_configs()]


def routers(arch: str) -> list[str]:
    """The `traces.timing --router` values of the routed drafters at `arch` ('groups:top_n')."""
    return [f"{e['router']['groups']}:{e['router']['top_n']}" for e in drafter_entries(arch).values() if e.get("router")]


# ------------------------------------------------------------------------------ stage 1: profiles

def profile_architectures(out: Path, names: Sequence[str], grid: dict[str, str], device: str, log,
                          mode: str = "eager") -> list[Path]:
    """`python -m traces.timing` per architecture; a failure (e.g. out of memory) is logged, not fatal."""
    written = []
    for name in names:
        spec = name if name == "tiny" else f"random:{name}"
        path = out / f"latency_{name}.parquet"
        cmd = [sys.executable, "-m", "traces.timing", "--model", spec, "--out", str(path), "--quiet",
               "--device", device, "--mode", mode, *sum(([f"--{k}", v] for k, v in grid.items()), [])]
        for router in routers(name) if name in ROUTED_ARCHITECTURES else ():
            cmd += ["--router", router]
        if name == "tiny":
            cmd += ["--drafter", "layers:1", "--dtype", "fp32"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            log(f"profile {name}: failed ({(done.stderr.strip().splitlines() or ['?'])[-1]})")
            continue
        log(f"profile {name}: {path.name}")
        written.append(path)
    return written


# -------------------------------------------------------------------------- stage 3: replayed loops

def synthetic_token_trace(prompt_ids: Sequence[str], n_out: int, seed: int) -> pd.DataFrame:
    """A seeded stand-in TokenTrace (ranks mostly 0, confidences uniform) for --tiny without traces."""
    rng = np.random.default_rng(seed)
    rows = []
    for pid in prompt_ids:
        for pos in range(n_out):
            rows.append(dict(run_id="synthetic", prompt_id=pid, pos=pos, token=0,
                             draft_rank=int(rng.choice([0, 0, 0, 0, 1, 2, 3, 9])),
                             draft_conf=float(rng.uniform(0.05, 1.0)), draft_q_token=0.5, alpha=0.5,
                             target_entropy=1.0))
    return schema.validate(pd.DataFrame(rows), "token")


def loop_models(tiny: bool, device, dtype):
    """(target, sd drafter, names of their latency rows) for the replayed loops."""
    if tiny:
        target = tiny_model(0, dtype=dtype, num_layers=4)
        return target, truncated(target, 1), {"target": "tiny", "draft_model": "layers:1", "arch": "tiny"}
    target = random_architecture("vicuna-7b", dtype=dtype, device=device)
    drafter = random_architecture("llama-68m", dtype=dtype, device=device)
    return target, drafter, {"target": "random:vicuna-7b", "draft_model": "random:llama-68m", "arch": "vicuna-7b"}


def run_loops(target, drafter, configs, token_sources, step_sources, prompts, look_prompts, repeats, max_new, log,
              mode: str = "eager"):
    """Measured runs: one row per (configuration, repeat) with tokens/s, plus all replayed steps; the
    plain baseline first. A method without a drafter has no drafter ranks: it replays its own
    `step_sources[method]` (StepTrace lengths) over `look_prompts`; the others `token_sources` over
    `prompts`. A method
    that takes a draft model runs with `drafter`; the others build their own at the target's shape."""
    runs, steps = [], []

    def measure(config: MethodConfig, decoder, sources, chosen) -> None:
        for rep in range(repeats):
            begin = time.perf_counter()
            done = run_replayed(decoder, sources, chosen, max_new_tokens=max_new)
            seconds = time.perf_counter() - begin
            tokens = sum(len(r.generation.tokens) for r in done)
            runs.append(dict(label=config.label, method=config.method, config=json.dumps(config.to_dict()),
                             repeat=rep, tokens=tokens, seconds=seconds, tokens_per_s=tokens / seconds,
                             steps=sum(len(r.generation.steps) for r in done), mode=mode))
            if rep == 0:
                steps.append(steps_frame(done, config.method, config, run_id=config.label))
        log(f"{config.label}: {statistics.median(r['tokens_per_s'] for r in runs if r['label'] == config.label):.1f} "
            "tokens/s")

    measure(BASELINE, replayed_decoder(BASELINE.method, target, mode=mode), token_sources, prompts)
    for config in configs:
        spec = methods.get(config.method)
        by_length = not spec.drafter_kinds
        sources = (step_sources or {}).get(config.method) if by_length else token_sources
        if sources is None:
            log(f"skip {config.label}: no step trace to replay a method without a drafter (--step-trace)")
            continue
        decoder = replayed_decoder(config.method, target, drafter if "draft_model" in spec.drafter_kinds else None,
                                   mode=mode, **config.to_dict())
        measure(config, decoder, sources, look_prompts if by_length else prompts)
    return pd.DataFrame(runs), pd.concat(steps, ignore_index=True)


# ------------------------------------------------------------------ stage 2b: coefficients, roofline

# (drafter rows, target rows) whose decode-latency ratio is a cost coefficient c (GLIDE Table 1, CORAL Table 1)
def coefficient_pairs(tiny: bool) -> list[tuple[str, str]]:
    if tiny:
        return [("layers:1", "tiny")] + [(e["model"], "tiny") for e in drafter_entries("tiny").values()]
    pairs = [("random:llama-68m", f"random:{t}") for t in ("vicuna-7b", "vicuna-13b", "vicuna-33b")]
    pairs += [("random:llama-160m", f"random:{t}") for t in ("vicuna-7b", "vicuna-13b", "vicuna-33b")]
    for arch in DRAFTER_ARCHITECTURES:
        pairs += [(e["model"], f"random:{arch}") for e in drafter_entries(arch).values()]
    return pairs


def coefficients(rows: pd.DataFrame, pairs, hardware: str, dtype: str) -> pd.DataFrame:
    """Decode (1 token, batch 1) latency ratios per context, and each target's fraction of the
    bandwidth bound: (forward weights + KV cache read) bytes / datasheet bandwidth / measured time."""
    decode = rows[(rows.n_tokens == 1) & (rows.batch == 1)].groupby(["model", "ctx_len"])["seconds"].median()
    out = []
    for drafter, target in pairs:
        for ctx in sorted(set(decode.get(drafter, pd.Series(dtype=float)).index) &
                          set(decode.get(target, pd.Series(dtype=float)).index)):
            row = dict(drafter=drafter, target=target, ctx_len=ctx, draft_s=decode[drafter][ctx],
                       target_s=decode[target][ctx], c=decode[drafter][ctx] / decode[target][ctx],
                       bandwidth_fraction=float("nan"))
            try:
                arch, hw = get_arch(target.split(":", 1)[-1]), get_hardware(hardware)
                size = dtype_bytes(dtype)
                bound = (forward_params(arch) * size + kv_bytes_per_token(arch, size) * ctx) / hw.bandwidth
                row["bandwidth_fraction"] = bound / decode[target][ctx]
            except ValueError:      # an architecture or hardware the costmodel registry does not know
                pass
            out.append(row)
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------- stage 4: fidelity

def campaign_drafters(names: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The loops' drafters as Profile drafters, named by their latency rows: the draft model first
    (a method that takes one runs with it), then every method's own at the target's shape."""
    return {"draft": {"kind": "draft_model", "model": names["draft_model"]}, **drafter_entries(names["arch"])}


def replayed_acceptance(token_frame: pd.DataFrame, configs: Sequence[MethodConfig]) -> dict[str, Any]:
    """The acceptance entry the step shapes read (CAPE's expected expansion, Kangaroo's reach): the
    replayed TokenTrace's greedy alpha and confidence bins, a top-K row for every bin size used."""
    rank = token_frame["draft_rank"].to_numpy()
    ks = sorted({1} | {int(b) for c in configs for b in (getattr(c, "bins", None) or ())})
    return {"drafter": "replayed", "temperature": 0.0, "alpha": float(np.mean(rank == 0)),
            "conf_bins": conf_bin_table(token_frame["draft_conf"].to_numpy(), {k: rank < k for k in ks}),
            "source": "the replayed TokenTrace"}


def campaign_profile(frames: Sequence[pd.DataFrame], names: dict[str, str], target_arch: dict[str, Any], hardware: str,
                     dtype: str, acceptance: dict[str, Any]) -> Profile:
    """A Profile of the campaign's own measurements: a fitted `calibrate.latency` table model per
    model of the LatencyTrace frames, the loops' drafters and the replayed acceptance."""
    rows = pd.concat(frames, ignore_index=True)
    latency = {name: fit_latency(group, kind="table", name=name).to_dict() for name, group in rows.groupby("model")
               if group["role"].iloc[0] in ("target", "draft")}
    return Profile.build(name="gpu campaign", hardware=hardware, dtype=dtype, target=names["target"],
                         models={names["target"]: target_arch}, latency=latency,
                         acceptance={"replayed": acceptance}, drafters=campaign_drafters(names))


def setup_for(profile: Profile, config: MethodConfig) -> Setup:
    """The Setup a loop of `config` ran as: the first drafter of the method's kinds (most fixed
    fields first) on which the engine runs exactly `config`; no drafter for a method without one."""
    spec = methods.get(config.method)
    names = sorted(profile.drafters_of(*spec.drafter_kinds), key=lambda d: -len(drafter_fixed(profile.drafter(d))))
    for name in names:
        drafter = profile.drafter(name)
        if engine_config(priced_config(config, drafter), drafter) == config:
            return Setup(profile, name, "replayed")
    if spec.drafter_kinds:
        raise InputError(f"{config.label}: no drafter of the campaign runs it")
    return Setup(profile, None, "replayed")


def predicted_seconds(steps: pd.DataFrame, config: MethodConfig, setup: Setup, prompt_len: int) -> float:
    """Seconds the Profile's latency models price one configuration's replayed steps at (+ a prefill
    per prompt): the method's step shape priced by `costmodel.step`, each step's realised draft
    forwards and verified tokens in place of the shape's expectations."""
    spec = methods.get(config.method)
    shape = spec.priced_shape(setup, spec.frame_of([priced_config(config, setup.drafter_spec)]))
    latency, ctx = setup.profile.seconds, steps["ctx_len"].to_numpy(dtype=float)
    forwards = steps["draft_forwards"].to_numpy()
    if forwards.max(initial=0) > shape.max_drafted:
        raise InputError(f"{config.label}: a replayed step ran {forwards.max()} draft forwards, its step shape "
                         f"has {shape.max_drafted}")
    reach = forwards[:, None] > np.arange(shape.max_drafted)[None, :]
    step_s = step_cost(latency, shape, ctx, reach=reach, verify_tokens=steps["verify_tokens"].to_numpy(dtype=float),
                       prompt_len=prompt_len, first_share=(steps["step"].to_numpy() == 0) & (forwards > 0)).total
    prefill = float(latency(setup.target, max(prompt_len - 1, 1), 0.0))
    return float(np.sum(step_s)) + steps["prompt_id"].nunique() * prefill


def fidelity_table(runs: pd.DataFrame, steps: pd.DataFrame, configs: Sequence[MethodConfig], profile: Profile,
                   prompt_len: int) -> pd.DataFrame:
    by_label = {c.label: c for c in configs}
    rows = []
    for label, group in runs.groupby("label", sort=False):
        config = by_label[label]
        tps = group["tokens_per_s"].to_numpy()
        measured = float(np.median(tps))
        predicted = group["tokens"].iloc[0] / predicted_seconds(steps[steps.run_id == label], config,
                                                               setup_for(profile, config), prompt_len)
        rows.append(dict(label=label, method=config.method, config=json.dumps(config.to_dict()),
                         measured_tps=measured, predicted_tps=predicted,
                         rel_error=(predicted - measured) / measured,
                         spread=float((tps.max() - tps.min()) / measured), repeats=len(tps)))
    table = pd.DataFrame(rows)
    baseline = table.loc[table.label == BASELINE.label].iloc[0]
    table["measured_speedup"] = table["measured_tps"] / float(baseline["measured_tps"])
    table["predicted_speedup"] = table["predicted_tps"] / float(baseline["predicted_tps"])
    return table


def report(table: pd.DataFrame, meta: dict[str, Any], coeffs: pd.DataFrame) -> str:
    spec = table[table.label != BASELINE.label]
    err = spec["rel_error"].abs()
    lines = ["# GPU campaign: replayed speculative loops, measured vs predicted", "",
             f"hardware: {meta['hardware']}, dtype: {meta['dtype']}, acceptance: {meta['acceptance']}, "
             f"runtime mode: {meta.get('runtime mode', 'eager')}", "",
             f"configurations: {len(spec)}; |relative error| of tokens/s predicted from the latency profiles: "
             f"median {err.median():.1%}, worst {err.max():.1%} ({spec.loc[err.idxmax(), 'label']}); "
             f"run-to-run spread (max-min over median): median {spec['spread'].median():.1%}, "
             f"worst {spec['spread'].max():.1%}", "",
             "| configuration | measured tok/s | predicted tok/s | error | spread | speedup (meas / pred) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in table.itertuples():
        lines.append(f"| {r.label} | {r.measured_tps:.1f} | {r.predicted_tps:.1f} | {r.rel_error:+.1%} | "
                     f"{r.spread:.1%} | {r.measured_speedup:.2f} / {r.predicted_speedup:.2f} |")
    lines += ["", "## Cost coefficients (decode, batch 1) and fraction of the bandwidth bound", "",
              "| drafter | target | ctx | c | target decode s | target bandwidth fraction |", "| --- | --- | --- | --- | --- | --- |"]
    for r in coeffs.itertuples():
        lines.append(f"| {r.drafter} | {r.target} | {r.ctx_len} | {r.c:.4f} | {r.target_s:.5f} | {r.bandwidth_fraction:.1%} |")
    return "\n".join(lines) + "\n"
