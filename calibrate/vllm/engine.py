"""vLLM's own per-step costs on top of the forwards' physics, fitted on published vLLM figures
(`calibrate.vllm.facts`), and the latency models they sit on.

A step of vLLM 0.10.1 (its GPU runner, no async scheduling) runs the target forward, samples, syncs
with the host, runs the proposer, and spends host time around it (scheduling, input preparation,
bookkeeping), none of which overlaps the next forward. So a step costs

    forward (roofline on `calibrate.vllm.grid`'s efficiencies, attention apart from the matmuls)
    + overhead_s                        the fixed per-step work (sampler, sync, vLLM's small kernels)
    + overhead_per_row_s x rows         host work per running request (ASSUMED, `facts.HOST_PER_ROW_S`)
    [EAGLE]  + speculation_s            rejection sampler, the drafter's input preparation
             + k drafter forwards       each max(its device time, launch_s): the host's work around a
                                        draft forward (metadata, graph replay), the first over the rows'
                                        accepted tokens
    [n-gram] + its fixed cost and the host search per request and per context token (ASSUMED)

Fitted: overhead_s on the published plain TPOT at batch 1 (`facts.EAGLE_SWEEP.plain_tpot_s`), and
speculation_s and the drafter's launch_s on the published EAGLE-3 steps at K = 2..7 (TPOT x
acceptance length), both within [0, 5 ms]; a value on its bound is a warning.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from calibrate.vllm import facts
from calibrate.vllm.grid import GridFit
from costmodel.latency import RowSums
from costmodel.params import Arch, drafter_arch, get_arch
from costmodel.step import StepCalibration
from methods import BASELINE
from profiles.latency import RooflineLatency

DTYPE = "bf16"
BOUND_S = 5e-3          # no per-step or per-forward host term of a warm engine takes longer


def target_arch() -> Arch:
    return Arch.from_dict({**get_arch("llama-3-8b").to_dict(), "source": facts.TARGET_SOURCE}, facts.TARGET)


def eagle_arch() -> Arch:
    raw = drafter_arch(facts.EAGLE3.name, target_arch(), eagle3=True, draft_vocab=facts.EAGLE_DRAFT_VOCAB)
    return Arch.from_dict({**raw, "source": f"{raw['source']}; {facts.EAGLE_SOURCE}"}, "eagle3")


def roofline(arch: Arch, grid: GridFit, name: str, launch_s: float = 0.0) -> RooflineLatency:
    """`arch` on the H100 datasheet at the grid's efficiencies, attention apart from the matmuls."""
    return RooflineLatency(arch=arch, hardware=facts.HARDWARE, dtype=DTYPE, bw_eff=grid.bw_eff,
                           flops_eff=grid.flops_eff, corner=grid.corner, attention_apart=True, launch_s=launch_s,
                           fit={"method": "calibrate.vllm", "efficiencies": "calibrate.vllm.grid (project H100 graph grid)",
                                **({"launch_s": "calibrate.vllm.engine (published EAGLE-3 steps)"} if launch_s else {})},
                           name=name)


@dataclass(frozen=True)
class EngineFit:
    """The latency models and the engine's terms per method, with what the fit saw."""

    target: RooflineLatency
    drafter: RooflineLatency
    calibrations: dict[str, StepCalibration]
    record: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def fit_engine(grid: GridFit, sweep: facts.EagleSweep = facts.EAGLE_SWEEP) -> EngineFit:
    """The engine's terms (module docstring) on top of `grid`'s efficiencies."""
    target = roofline(target_arch(), grid, facts.TARGET)
    ctx = sweep.mean_ctx
    plain_forward = float(target.predict(1, ctx))
    overhead_s = sweep.plain_tpot_s - plain_forward - facts.HOST_PER_ROW_S
    k = np.asarray(sweep.k, float)
    accepted = np.asarray(sweep.acceptance_length, float)
    measured = np.asarray(sweep.step_s())
    verify = target.predict(k + 1, ctx)

    def predicted(x) -> np.ndarray:
        speculation_s, launch_s = x
        drafter = roofline(eagle_arch(), grid, "eagle3", launch_s)
        first = drafter.predict_rows(RowSums.of(accepted[None, :], ctx, logits=1.0))
        later = drafter.predict(1, ctx + accepted)
        return verify + overhead_s + facts.HOST_PER_ROW_S + speculation_s + first + (k - 1) * later

    fit = least_squares(lambda x: predicted(x) / measured - 1.0, [5e-4, 5e-4], bounds=([0.0, 0.0], [BOUND_S, BOUND_S]))
    speculation_s, launch_s = (float(v) for v in fit.x)
    warnings = [f"{name} {value * 1e3:.3f} ms on its bound [0, {BOUND_S * 1e3:g} ms]"
                for name, value in (("speculation_s", speculation_s), ("drafter launch_s", launch_s))
                if value < 1e-6 or value > BOUND_S * 0.999]
    if overhead_s <= 0:
        warnings.append(f"the plain step's fixed cost {overhead_s * 1e3:.3f} ms is not positive: the roofline alone "
                        f"exceeds the published TPOT")
        overhead_s = 0.0
    drafter = roofline(eagle_arch(), grid, "eagle3", launch_s)
    errors = predicted(fit.x) / measured - 1.0
    common = dict(overhead_s=overhead_s, overhead_per_row_s=facts.HOST_PER_ROW_S)
    calibrations = {
        BASELINE: StepCalibration(**common),
        facts.EAGLE3.name: StepCalibration(**common, speculation_s=speculation_s),
        facts.NGRAM.name: StepCalibration(overhead_s=overhead_s + facts.NGRAM_SPECULATION_S,
                                         overhead_per_row_s=facts.HOST_PER_ROW_S + facts.NGRAM_PER_ROW_S,
                                         overhead_per_ctx_token_s=facts.NGRAM_PER_TOKEN_S)}
    record = {"plain_forward_s": plain_forward, "overhead_s": overhead_s, "speculation_s": speculation_s,
              "drafter_launch_s": launch_s, "drafter_forward_s_at_batch1": float(drafter.predict(1, ctx)),
              "eagle_steps": {"k": list(sweep.k), "measured_s": [round(v, 6) for v in measured],
                              "fitted_s": [round(float(v), 6) for v in predicted(fit.x)],
                              "error": [round(float(e), 4) for e in errors]},
              "sources": [sweep.source, facts.HOST_PER_ROW_SOURCE, facts.NGRAM_SOURCE_COST,
                          facts.NGRAM_SPECULATION_SOURCE]}
    return EngineFit(target, drafter, calibrations, record, tuple(warnings))
