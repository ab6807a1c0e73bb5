"""sd: speculative decoding with a draft model's chain of gamma tokens (Leviathan et al.)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.leviathan import expected_tokens_by_position
from costmodel.step import DraftPart, StepShape, chain_width
from methods.config import Int, MethodConfig, param
from methods.draws import ChainSampler, MarkovChainSampler
from methods.engines import (HF_ASSISTED, EngineConfig, drafter_checkpoint, hf_chain, sglang_requires,
                             verified_tokens, vllm_requires)
from methods.assumed import AssumedDrafter, draft_model_for
from methods.spec import MethodSpec, PlotSpec

MAX_DEPTH = 64
GAMMAS = tuple(range(1, 13))          # the sweep's draft lengths


@dataclass(frozen=True)
class SDConfig(MethodConfig):
    method = "sd"
    gamma: int = param(Int("g", "draft length", low=1, high=MAX_DEPTH), 4)


def chain_betas(acceptance, gamma: np.ndarray) -> np.ndarray:
    """(C, max gamma) beta_1..beta_gamma of each configuration's chain, as measured in chains of its
    own gamma where the acceptance model records them (`AcceptanceModel.beta`); zero past a row's
    gamma."""
    gamma = np.asarray(gamma, dtype=np.int64)
    beta = np.zeros(gamma.shape + (int(gamma.max()),))
    for g in np.unique(gamma):
        beta[gamma == g, :g] = acceptance.beta(int(g))
    return beta


def chain_tokens(setup, gamma: np.ndarray, scale: np.ndarray | None = None) -> np.ndarray:
    """Leviathan with per-position acceptance beta_i (`chain_betas`), times a per-configuration
    `scale` (a router's recall) when given: E = 1 + sum_i prod_{j<=i} beta_j (over the setup's
    generation length where it has one)."""
    gamma = np.asarray(gamma, dtype=np.int64)
    beta = chain_betas(setup.acceptance, gamma)
    if scale is not None:
        beta = np.clip(beta * np.asarray(scale, dtype=float)[:, None], 0.0, 1.0)
    return expected_tokens_by_position(beta, gamma, setup.new_tokens)


def chain_sampler(setup, config, gamma: int, scale: float = 1.0, acceptance_model: str = "independent"):
    """Independent per-position draws (beta_i), or the bursty Markov chain when asked for."""
    if acceptance_model == "markov":
        markov = setup.need("markov", config.method)
        return MarkovChainSampler(gamma, markov.p_aa, markov.p_ra)
    return ChainSampler(gamma, np.clip(setup.acceptance.beta(gamma) * scale, 0.0, 1.0))


def drafter_model(setup) -> str:
    return setup.drafter_spec.model or setup.drafter


def own_kv(setup) -> str | None:
    """The draft model keeps its own KV cache (GLIDE reads the target's instead)."""
    return drafter_model(setup) if setup.drafter_spec.kind == "draft_model" else None


def sd_vllm(setup, config, method: str, extra: dict | None = None) -> EngineConfig:
    """vLLM's `--speculative-config` of a chain of `config.gamma` drafts by `method` ('draft_model',
    'eagle', 'eagle3'); exact unless the caller says what differs."""
    model = drafter_checkpoint(setup)
    return EngineConfig("vllm", {"method": method, "model": model, "num_speculative_tokens": config.gamma,
                                 **(extra or {})}, "exact", models=(model,), requires=vllm_requires(method))


class SD(MethodSpec):
    name, config, summary = "sd", SDConfig, "draft-model chain of gamma tokens"
    drafter_kinds = ("draft_model",)
    decoder = "runtime.engine.sd:SD"
    calibration = ("sd g1", "sd g4", "sd g8")
    batch_calibration = ("sd g1", "sd g3")
    campaign = tuple(f"sd g{g}" for g in (1, 2, 3, 4, 5, 6, 8, 10, 12))
    plot = PlotSpec(x="gamma")
    engine_offered, aliases = True, ("draft_model",)      # vLLM's name

    def assumed_drafters(self, target, arch):
        """The registry's smallest model of the target's tokenizer; the acceptance of LLaMA-68M drafting
        LLaMA-13B (MCSD Table 7) stands in for any small draft model."""
        found = draft_model_for(arch)
        if found is None:
            return {}
        name, model = found
        return {name: AssumedDrafter({"kind": "draft_model", "model": name}, model, "mcsd-llama-13b-a6000", "llama-68m",
                                     "alpaca", "the acceptance of LLaMA-68M drafting LLaMA-13B (MCSD Table 7)", any_model=True)}

    def space(self, setup, gammas=GAMMAS):
        frame = pd.DataFrame({"gamma": np.asarray(gammas, dtype=np.int64)})
        frame["config"] = self.config.labels(frame)
        return frame

    def expected_tokens(self, setup, frame):
        return chain_tokens(setup, frame["gamma"].to_numpy(np.int64))

    def step_shape(self, setup, frame):
        gamma = frame["gamma"].to_numpy(np.int64)
        return StepShape(setup.target, gamma + 1.0, (DraftPart(drafter_model(setup)),), chain_width(gamma),
                         overhead_s=setup.overhead_s, draft_kv_model=own_kv(setup))

    def sampler(self, setup, config, acceptance_model="independent", **options):
        return chain_sampler(setup, config, config.gamma, acceptance_model=acceptance_model)

    def replay_rules(self, config):
        return {"levels": (1,) * config.gamma}

    def to_engine(self, engine, setup, config):
        model = drafter_checkpoint(setup)
        if engine == "vllm":
            return sd_vllm(setup, config, "draft_model")
        if engine == "sglang":
            return EngineConfig("sglang", {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": model,
                                           "--speculative-num-steps": config.gamma, "--speculative-eagle-topk": 1,
                                           "--speculative-num-draft-tokens": verified_tokens(self, setup, config)},
                                "exact", models=(model,), requires=sglang_requires("STANDALONE"))
        return EngineConfig("hf", {}, "exact", models=(model,), requires=HF_ASSISTED,
                            generation_config={"assistant": hf_chain(config.gamma)})


SPEC = SD()
ORDER = 1
