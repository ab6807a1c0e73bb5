"""A method's configuration as the engines people deploy take it: the records `MethodSpec.to_engine`
returns, and the engine facts every export shares.

Each method maps itself (its module's `to_engine`); an engine it has no counterpart in gets a
`NoCounterpart` with the reason, never a mapping to something else. `match` is "exact" when the
engine runs the same algorithm with the same shape (the prediction is about what the engine will
run) and "approximate" when it runs a relative (`differs` says what is dropped; the prediction is
then the specsim method's). `requires` names the engine version or option the mapping needs.

transformers splits assisted generation's options between two places (generation/utils.py and
generation/candidate_generator.py): the draft length, its schedule and the confidence threshold
are read from the *assistant model's* `generation_config` when the candidate generator is built
(a value passed to `generate()` is not used, and the threshold is overwritten by the
assistant's), while `assistant_early_exit`, `prompt_lookup_num_tokens` and
`max_matching_ngram_size` are `generate()` options. So an hf mapping's `settings` are `generate()`
keyword arguments only and `generation_config` holds the fields to set on a model's
generation_config: the assistant's, or the target's when the target drafts for itself (early exit).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.errors import InputError

ENGINES = ("vllm", "sglang", "hf")

# transformers' defaults when the assistant's generation_config leaves them unset (>= 4.45):
# 20 tokens, "constant", a 0.4 confidence threshold that ends most drafts after one or two tokens.
HF_ASSISTED = "transformers >= 4.45 (assistant_confidence_threshold on the assistant's generation_config)"
HF_PROMPT_LOOKUP = "transformers >= 4.45 (generate(prompt_lookup_num_tokens=..., max_matching_ngram_size=...))"
HF_EARLY_EXIT = "transformers >= 4.47 (generate(assistant_early_exit=...))"
VLLM_SCHEDULE = ("vLLM >= 0.24 for num_speculative_tokens_per_batch_size (Dynamic SD, vllm-project/vllm#32374; "
                 "the V1 model runner; with --data-parallel-size > 1 vLLM drops the schedule for num_speculative_tokens)")
SGLANG_MAX_RUNNING = ("SGLang sets --max-running-requests to 48 under EAGLE, EAGLE3 and STANDALONE "
                      "speculation unless the flag is given")


@dataclass(frozen=True)
class EngineConfig:
    """One specsim configuration as an engine accepts it."""

    engine: str
    settings: dict[str, Any]          # vllm: --speculative-config; sglang: launch flags; hf: generate() kwargs
    match: str                        # "exact" or "approximate"
    differs: str = ""                 # what the engine does not do of the specsim method
    models: tuple[str, ...] = field(default_factory=tuple)   # Profile model names to replace by checkpoints
    requires: str = ""                # the engine version / option this mapping needs
    generation_config: dict[str, dict[str, Any]] = field(default_factory=dict)  # hf: "assistant"/"target" -> fields
    runs_on: Any = None               # the Setup the engine runs it on where not the priced one (None: the same)
    unpriced: str = ""                # what the engine does differently that even runs_on does not price


@dataclass(frozen=True)
class DrafterOnly:
    """What an export reads of a setup where no Profile is at hand (an engine measured as it is): the
    drafter's name and its Profile entry (None: the method runs without one)."""

    drafter: str | None = None
    drafter_spec: Any = None


@dataclass(frozen=True)
class NoCounterpart:
    engine: str
    method: str
    reason: str


def parse_engines(text: str) -> list[str]:
    """'vllm,hf' -> ['vllm', 'hf']; InputError naming the value and the engines allowed."""
    chosen = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    for name in chosen:
        if name not in ENGINES:
            raise InputError(f"--export: unknown engine '{name}' in '{text}' (allowed: {', '.join(ENGINES)})")
    if not chosen:
        raise InputError(f"--export: no engine in '{text}' (allowed: {', '.join(ENGINES)})")
    return list(dict.fromkeys(chosen))


def drafter_checkpoint(setup) -> str:
    """The model name a drafter's checkpoint replaces in an export (the Profile's)."""
    spec = setup.drafter_spec
    return str((spec.model if spec is not None else None) or setup.drafter)


def verified_tokens(spec, setup, config) -> int:
    """Tokens one step verifies by the method's own step shape (an engine's num-draft-tokens)."""
    import numpy as np

    return int(round(float(np.ravel(spec.step_shape(setup, spec.frame_of([config])).verify_tokens)[0])))


def vllm_requires(method: str) -> str:
    """What vLLM needs to run `--speculative-config` method `method` (the option names are those of
    vllm/config/speculative.py)."""
    if method == "draft_model":
        return "vLLM with V1 draft-model speculation, method 'draft_model' (vllm-project/vllm#24322; 0.13 refuses it)"
    if method == "ngram":
        return "vLLM with method 'ngram' (prompt_lookup_max is required, prompt_lookup_min defaults to 1)"
    return f"vLLM (V1 engine) with --speculative-config method '{method}'"


def sglang_requires(algorithm: str) -> str:
    """What SGLang needs to run `--speculative-algorithm algorithm` (its cap on running requests
    under speculation, `SGLANG_MAX_RUNNING`, is the export's to state with the batch range)."""
    return f"SGLang whose launch_server takes --speculative-algorithm {algorithm}"


def hf_chain(gamma: int, threshold: float = 0.0) -> dict[str, Any]:
    """The generation_config fields of an assisted chain of exactly `gamma` drafts per step (a
    threshold of 0 turns transformers' confidence stop off; > 0 stops after a draft below it)."""
    return {"num_assistant_tokens": int(gamma), "num_assistant_tokens_schedule": "constant",
            "assistant_confidence_threshold": float(threshold)}
