"""`python -m calibrate.quick --profile P --out P2`: a Profile moved to this machine in minutes, not
the recording campaign's hours.

A CPU's speed and the shape of its step cost (how a 4-token verify compares with one token, what the
BLAS does at a few rows, what Python costs around a forward) move with the CPU model, its SIMD, the
threads and the torch build; acceptance does not. So the latency part is measured again and the rest
kept:
- the target's forward on a coarse grid (QUICK_TOKENS x QUICK_CTX at batch 1, moved inside the widths and
  contexts the table measured; random weights of its architecture: latency does not depend on the weights),
  timed in QUICK_ROUNDS rounds, each point's median (`traces.timer.across_rounds`) against what the Profile's table
  prices there: a ratio per point, interpolated in (log2 tokens, context) and held past the grid's
  edges (`Correction`), multiplies every point of the target's table, and every drafter table the
  machine could not time itself (a draft model is the same kernels at the same widths);
- where the Profile's engine pads its batches (a batch engine's Profile): its table's forwards timed through
  the batch engine's cache and masks, as they were recorded, forwards of QUICK_BATCH_TOKENS at
  QUICK_BATCHES too (the batch's own factor over batch 1's, per width), and a joining request's prefill
  (PREFILL_PROMPTS through the batch engine, against the fitted prefill terms, which it scales);
- each drafter the methods build from the target (`traces.drafter_timing`) timed at one token and
  QUICK_CTX, moved inside the contexts its table measured: its own ratio;
- the engine's seconds beside the forwards (`profiles.parts.EngineTerms`: fixed per-step, per-token
  and per-forward work, Python's): plain decoding run through the engine for QUICK_STEPS steps, its
  step beside its forward, against what the Profile says plain decoding pays beyond its forward (through
  the continuous-batching engine at one row where the Profile's engine pads its batches); the ratio scales
  every additive term, per-row terms included (the scales, ratios to a forward, are kept); where those terms
  are under ENGINE_MIN_SHARE of the plain step the residual is noise, and they are kept as they are.
The new Profile records this machine (`profiles.machine.this_machine`) and, in its provenance, what was
measured again, the ratios and the machine, beside the source Profile's name; the source file is never
touched (the new one is written atomically to --out). 35 s on 2 cores for the single-request SmolLM2 Profile.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import methods
from common.cli import CliParser, cli_entry
from common.errors import InputError
from common.rundir import claim_file, git_commit
from costmodel.step import PADDED, StepCalibration
from profiles.latency import TableLatency
from profiles.machine import Machine, this_machine
from profiles.parts import EngineTerms
from profiles.profile import Profile
from profiles.record import Record
from runtime.engine import make_decoder
from runtime.engine.batch import BatchEngine
from runtime.models import random_architecture
from traces.drafter_timing import drafter_entries, drafter_rows
from traces.timer import Timer, across_rounds
from traces.forwards import Grid, profile_model

QUICK_TOKENS = (1, 2, 4, 8, 16, 64)      # widths of the target's forwards timed again
QUICK_CTX = (0, 1024)                    # contexts they are timed at
QUICK_ROUNDS = 3                          # the batch-1 grid timed this many times over, each point its median:
# the first round of a fresh process read one point far off (three rounds in one process, 2026-11-29: a 2-token
# forward read x1.36, x0.97 and x0.92 its table), and a single reading put that into the step's shape (a 2-token
# verify priced below a plain step)
QUICK_STEPS = 24                          # plain decoding steps that time the engine's own work
QUICK_BATCHES = (8, 32)                   # a batched table's forwards timed again at these batches too,
QUICK_BATCH_TOKENS = (1, 2, 4, 8)         # at these widths: how a width's cost moved is not one batch's to another's
PREFILL_PROMPTS = (64, 256)               # a padded engine's prefills timed at these prompt lengths
PREFILL_REPEATS = 3
# below this share of the Profile's plain step, what the engine adds beside its forward is smaller than what the
# forward's own re-measurement misses (on one thread here the engine's step ran 1.4x the timed forward where the
# Profile, at two, had 1.13x): a ratio read off it is noise (x21.6 on the single-request Profile) and is not applied
ENGINE_MIN_SHARE = 0.05
ADDITIVE = ("verify_fixed_s", "verify_per_token_s", "draft_per_forward_s", "draft_per_token_s", "first_draft_s",
            "first_draft_per_token_s", "overhead_s", "overhead_per_token_s", "speculation_s", "verify_wide_extra_s",
            "overhead_per_row_s", "verify_per_row_s", "draft_per_row_s", "draft_per_row_forward_s")
PREFILL = ("prefill_per_request_s", "prefill_per_token_s")     # a padded engine's fitted prefill of a joining request
PLAIN_STEP = ("verify_fixed_s", "verify_per_token_s", "overhead_s", "overhead_per_token_s", "overhead_per_row_s",
              "verify_per_row_s")     # what a plain decoding step of one row pays beside its scaled forward


@dataclasses.dataclass(frozen=True)
class Correction:
    """This machine's time over the Profile's at measured (tokens, context) points, read at any point:
    bilinear in (log2 tokens, context) inside the grid, the nearest edge outside it."""

    tokens: tuple[float, ...]
    ctx: tuple[float, ...]
    ratio: np.ndarray         # [tokens][ctx]
    batch: tuple[float, ...] = (1.0,)
    batch_tokens: tuple[float, ...] = (1.0,)
    batch_ratio: np.ndarray = dataclasses.field(default_factory=lambda: np.ones((1, 1)))  # [batch][batch_tokens]

    def at_batch(self, batch, n_tokens=1.0) -> np.ndarray:
        """The factor `batch` rows of `n_tokens` each add to the batch-1 ratio: bilinear in (log2 batch,
        log2 tokens) over what was timed, the nearest edge outside it (1 where no batch was timed)."""
        b, n = np.broadcast_arrays(np.asarray(batch, float), np.asarray(n_tokens, float))
        lb = np.clip(np.log2(b), np.log2(self.batch[0]), np.log2(self.batch[-1])).ravel()
        ln = np.clip(np.log2(n), np.log2(self.batch_tokens[0]), np.log2(self.batch_tokens[-1])).ravel()
        table = np.asarray(self.batch_ratio, float).reshape(len(self.batch), len(self.batch_tokens))
        by_width = np.stack([np.interp(ln, np.log2(self.batch_tokens), row) for row in table])     # [batch][point]
        return np.array([np.interp(x, np.log2(self.batch), by_width[:, i]) for i, x in enumerate(lb)]).reshape(b.shape)

    def __call__(self, n_tokens, ctx_len) -> np.ndarray:
        x = np.clip(np.log2(np.asarray(n_tokens, float)), np.log2(self.tokens[0]), np.log2(self.tokens[-1]))
        c = np.clip(np.asarray(ctx_len, float), self.ctx[0], self.ctx[-1])
        by_ctx = np.array([np.interp(x, np.log2(self.tokens), self.ratio[:, j]) for j in range(len(self.ctx))])
        if len(self.ctx) == 1:
            return by_ctx[0]
        return np.array([np.interp(ci, self.ctx, col) for ci, col in zip(np.ravel(c), by_ctx.reshape(len(self.ctx), -1).T)]
                        ).reshape(np.shape(x))

    def median(self) -> float:
        return float(np.median(self.ratio))


def corrected(table: TableLatency, correction: Correction) -> TableLatency:
    """`table` with every point multiplied by the correction at its (tokens, context, batch)."""
    n, c = np.meshgrid(np.asarray(table.n_tokens), np.asarray(table.ctx_len), indexing="ij")
    factor = np.asarray(correction(n.ravel(), c.ravel())).reshape(n.shape)[:, :, None]
    width, batch = np.meshgrid(np.asarray(table.n_tokens, float), np.asarray(table.batch, float), indexing="ij")
    factor = factor * correction.at_batch(batch, width)[:, None, :]
    return dataclasses.replace(table, seconds=np.asarray(table.seconds) * factor,
                               fit=Record({**table.fit.to_json(), "remeasured": "scaled by calibrate.quick"}))


def quick_grid(table: TableLatency, tokens=QUICK_TOKENS) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(tokens, contexts) to time again: `tokens` x QUICK_CTX moved inside what `table` measured, so
    every ratio sets a measurement against a measurement (a batch engine's table stops at 12 tokens and
    512 of context: its extrapolation is no baseline)."""
    def inside(values, measured) -> tuple[int, ...]:
        low, high = float(np.min(measured)), float(np.max(measured))
        return tuple(sorted({int(round(min(max(v, low), high))) for v in values}))

    return inside(tokens, table.n_tokens), inside(QUICK_CTX, table.ctx_len)


def target_correction(profile: Profile, model, timer: Timer, seed: int) -> Correction:
    """The target's forwards timed again on the quick grid, over what its table prices: through the
    batch engine's cache and masks where the Profile's engine pads its batches (as its table was timed,
    `traces.timing --cache batch`), and, where the table spans batches, forwards at
    QUICK_BATCHES x QUICK_BATCH_TOKENS too (their ratio over batch 1's at each width: a batch's width shape
    is timed, not carried from batch 1's)."""
    old = profile.latency_model(profile.target)
    tokens, ctx = quick_grid(old)
    cache = "batch" if profile.engine.batching == PADDED else "kv"
    widest = float(np.max(old.batch))
    batches = sorted({int(min(b, widest)) for b in QUICK_BATCHES} - {1}) if widest > 1 else []
    rows = across_rounds(pd.DataFrame([r for _ in range(QUICK_ROUNDS) for r in profile_model(
        model, Grid(tokens, ctx, (1,)), timer, seed, cache_kind=cache)])).to_dict("records")
    ratio = np.array([[r["seconds"] / float(old.predict(r["n_tokens"], r["ctx_len"], 1)) for r in rows
                       if r["n_tokens"] == n] for n in tokens])
    correction = Correction(tuple(map(float, tokens)), tuple(map(float, ctx)), ratio)
    if not batches:
        return correction
    widths = quick_grid(old, QUICK_BATCH_TOKENS)[0]
    wide = profile_model(model, Grid(widths, ctx, tuple(batches)), timer, seed, cache_kind=cache)

    def factor(n: int, b: int) -> float:          # this machine over the table, over batch 1's ratio there
        return float(np.median([r["seconds"] / float(old.predict(n, r["ctx_len"], b)) / float(correction(n, r["ctx_len"]))
                                for r in wide if r["batch"] == b and r["n_tokens"] == n]))

    by_batch = [[factor(n, b) for n in widths] for b in batches]
    return dataclasses.replace(correction, batch=(1.0, *map(float, batches)), batch_tokens=tuple(map(float, widths)),
                               batch_ratio=np.array([[1.0] * len(widths), *by_batch]))


def prefill_ratio(profile: Profile, model, seed: int) -> float | None:
    """A padded engine's prefills here (each request prefilled alone as it joins: PREFILL_PROMPTS,
    timed through the batch engine) over what the Profile's fitted prefill terms price for them; None
    where the Profile fitted none (its prefill is the target's forward, corrected with the table)."""
    terms = profile.step_calibration(methods.BASELINE)
    if profile.engine.batching != PADDED or not (terms.prefill_per_request_s or terms.prefill_per_token_s):
        return None
    gen = torch.Generator().manual_seed(seed)
    measured = priced = 0.0
    for n in PREFILL_PROMPTS:
        prompt = [int(t) for t in torch.randint(0, model.config.vocab_size, (n,), generator=gen)]
        engine = BatchEngine(methods.BASELINE, model, batch=1, seed=seed, context=n + 8)
        engine.generate([prompt], 1)                               # warm-up
        measured += statistics.median(engine.generate([prompt], 1).steps[0].prefill_s for _ in range(PREFILL_REPEATS))
        priced += terms.prefill_per_request_s + terms.prefill_per_token_s * n
    return measured / priced


def drafter_ratios(profile: Profile, timer: Timer, seed: int) -> dict[str, float]:
    """Latency model -> this machine's one-token draft forward over the Profile's, for every drafter
    the methods build from the target that the Profile prices, timed at QUICK_CTX moved inside the
    contexts its table measured (`quick_grid`)."""
    entries = {n: e for n, e in drafter_entries(profile.target).items() if e["model"] in profile.latency}
    by_ctx: dict[tuple[int, ...], dict] = {}
    for name, entry in entries.items():
        model = profile.latency_model(entry["model"])
        ctx = quick_grid(model)[1] if isinstance(model, TableLatency) else QUICK_CTX
        by_ctx.setdefault(ctx, {})[name] = entry
    rows = [row for ctx, some in by_ctx.items()
            for row in drafter_rows(profile.target, ctx, timer, torch.device("cpu"), torch.float32, seed, entries=some)]
    ratios: dict[str, list[float]] = {}
    for r in rows:
        old = float(profile.latency_model(r["model"]).predict(1, r["ctx_len"], 1))
        ratios.setdefault(r["model"], []).append(r["seconds"] / old)
    return {model: float(np.median(values)) for model, values in ratios.items()}


def engine_ratio(profile: Profile, model, correction: Correction, seed: int, prompt_len: int = 64) -> float:
    """Plain decoding's work beside its forward here, over what the Profile's engine terms price for
    it: QUICK_STEPS steps on a random-weight target through the engine the Profile describes (the
    continuous-batching one, one row, where the Profile's engine pads its batches); 1 (the terms kept)
    where that work is under ENGINE_MIN_SHARE of the Profile's plain step."""
    prompt = [int(t) for t in torch.randint(0, model.config.vocab_size, (prompt_len,),
                                            generator=torch.Generator().manual_seed(seed))]
    if profile.engine.batching == PADDED:
        engine = BatchEngine(methods.BASELINE, model, batch=1, seed=seed, context=prompt_len + QUICK_STEPS + 8)
        engine.generate([prompt], 4)                                # warm-up
        steps = engine.generate([prompt], QUICK_STEPS).steps[1:]
        ctx = statistics.median(s.rows[0].ctx_len for s in steps)
    else:
        decoder = make_decoder(methods.BASELINE, model)
        decoder.generate(prompt, 4)                                 # warm-up
        steps = decoder.generate(prompt, QUICK_STEPS).steps[1:]
        ctx = statistics.median(s.ctx_len for s in steps)
    step = statistics.median(s.draft_s + s.verify_s + s.overhead_s for s in steps)
    terms = profile.step_calibration(methods.BASELINE)
    table = float(profile.seconds(profile.target, 1, ctx))           # the Profile's forward
    forward = table * float(correction(1, ctx))                         # this machine's
    additive = sum(getattr(terms, name) for name in PLAIN_STEP)
    measured = step - terms.verify_scale * forward
    at_home = terms.verify_scale * table + additive                    # the Profile's plain step
    if additive <= 0 or measured <= 0 or additive < ENGINE_MIN_SHARE * at_home:
        return 1.0           # nothing measurable beside the forward: the terms are kept
    return measured / additive


def scaled(terms: StepCalibration, ratio: float, prefill: float | None = None) -> StepCalibration:
    """The engine's additive terms times `ratio`; its prefill terms times `prefill` (None: kept)."""
    out = dataclasses.replace(terms, **{k: getattr(terms, k) * ratio for k in ADDITIVE})
    if prefill is None:
        return out
    return dataclasses.replace(out, **{k: getattr(terms, k) * prefill for k in PREFILL})


def moved_engine(terms: EngineTerms, ratio: float, prefill: float | None) -> EngineTerms:
    """The engine's terms on this machine: every calibration `scaled`, its fit and how it batches kept."""
    return dataclasses.replace(terms, methods=Record({m: scaled(c, ratio, prefill) for m, c in terms.methods.items()}),
                               pooled=None if terms.pooled is None else scaled(terms.pooled, ratio, prefill))


def measuring(profile: Profile, threads: int, seed: int) -> tuple[Timer, object]:
    """(timer, random-weight target) the re-measurement times with, on `threads` torch threads; InputError
    for a Profile whose target is not priced by a table measured on a machine."""
    if not isinstance(profile.latency_model(profile.target), TableLatency):
        raise InputError(f"profile '{profile.name}' prices its target with a {profile.latency_model(profile.target).kind} "
                         "model of published figures, not a measured table: nothing here to re-measure "
                         "(calibrate.transfer moves a Profile between GPUs)")
    torch.set_num_threads(threads)
    timer = Timer(torch.device("cpu"), warmup=2, repeats=7, min_repeats=3, point_seconds=2.0)
    return timer, random_architecture(profile.target, seed=seed, dtype=torch.float32)  # latency does not see weights


def quick_profile(profile: Profile, threads: int, seed: int = 0) -> tuple[Profile, dict]:
    """`profile` moved to this machine (module docstring) and the record of what was measured."""
    started = time.perf_counter()
    timer, model = measuring(profile, threads, seed)
    correction = target_correction(profile, model, timer, seed)
    drafters = drafter_ratios(profile, timer, seed)
    engine = engine_ratio(profile, model, correction, seed)
    prefill = prefill_ratio(profile, model, seed)
    latency = {}
    for name, model in profile.latency.items():
        if name in drafters:
            latency[name] = corrected(model, Correction((1.0,), (0.0,), np.array([[drafters[name]]])))
        elif isinstance(model, TableLatency):
            latency[name] = corrected(model, correction)
        else:
            latency[name] = model
    engine_terms = moved_engine(profile.engine, engine, prefill)
    machine = this_machine(threads)
    record = {"from": profile.name, "command": "python -m calibrate.quick", "commit": git_commit(),
              "created": dt.datetime.now(dt.timezone.utc).isoformat(), "machine": machine.describe(),
              "target_ratio": {"tokens": list(correction.tokens), "ctx": list(correction.ctx),
                               "ratio": np.round(correction.ratio, 4).tolist(), "batch": list(correction.batch),
                               "batch_tokens": list(correction.batch_tokens),
                               "batch_ratio": np.round(correction.batch_ratio, 4).tolist()},
              "prefill_ratio": None if prefill is None else round(prefill, 4),
              "drafter_ratio": {k: round(v, 4) for k, v in drafters.items()}, "engine_ratio": round(engine, 4),
              "kept": "acceptance, workload, drafters; the engine's scales (ratios to a forward)",
              "seconds": round(time.perf_counter() - started, 1)}
    moved = dataclasses.replace(profile, latency=latency, engine=engine_terms, machine=machine,
                                name=f"{profile.name} (re-measured on this machine)",
                                provenance=dataclasses.replace(profile.provenance, remeasured=Record(record)))
    return moved, record


def same_machine_note(profile: Profile, here: Machine, source: Path | str) -> str:
    """A note where `profile` was measured on this very machine ("" elsewhere): the re-profile re-times
    each point once, and on the recording machine that moved the table's shape by more than the
    machine had (docs/results.md, "The batch engine's verify, chosen by held-out error")."""
    if not profile.machine.measured or profile.machine.differences(here):
        return ""
    return (f"note: {source} was measured on this machine ({here.describe()}); its predictions as it is held "
            "better than through a re-profile here (docs/results.md): the re-profile is for another machine")


@cli_entry
def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m calibrate.quick", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, type=Path, help="the Profile to move to this machine")
    parser.add_argument("--out", required=True, type=Path, help="where the moved Profile is written (atomically)")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads to measure with, as the runs it will predict use them (default 2, "
                             "as experiments.fidelity and the SmolLM2 campaign record)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt (default 0)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    if args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    if args.out.resolve() == args.profile.resolve():
        raise InputError(f"--out {args.out} is the source Profile: write the moved one beside it")
    profile = Profile.load(args.profile)
    claim_file(args.out, args.overwrite)
    if (note := same_machine_note(profile, this_machine(args.threads), args.profile)):
        print(note, file=sys.stderr)
    moved, record = quick_profile(profile, args.threads, args.seed)
    moved.save(args.out)
    print(f"{args.profile} -> {args.out} in {record['seconds']:.0f} s on {record['machine']}: target forwards x"
          f"{np.min(moved.provenance.remeasured['target_ratio']['ratio']):.2f}-"
          f"{np.max(moved.provenance.remeasured['target_ratio']['ratio']):.2f}, drafters "
          + (", ".join(f"{k} x{v:.2f}" for k, v in record["drafter_ratio"].items()) or "none timed")
          + f", the engine's own seconds x{record['engine_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
