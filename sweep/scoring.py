"""Scoring a method's configurations on one Profile, and the simulator re-score: generic over the
method registry (`methods`), priced by the one step-cost model (`costmodel.step`).

For a method on a Setup (a Profile's target, drafter and acceptance entry) and a frame of its
configurations (`spec.space`):

    tokens   = spec.expected_tokens(setup, frame)       (or, given a TokenTrace and a replayable
                                                          method, exact greedy replay: traces.replay)
    shape    = spec.priced_shape(setup, frame)          (the forwards one step runs, as the engine runs them)
    step_s   = draft_s + verify_s + overhead_s            (`costmodel.step.step_cost`, the catch-up spread)
    speedup  = tokens * t_target(1 token) / step_s      (against plain decoding, same batch)

Scored columns (SCORE_COLUMNS): speedup, tokens_per_step (bonus included), verified_per_step
(query tokens per sequence in the verify forward), draft_cost (draft seconds per step in units of
one plain target forward), draft_forwards (expected draft forwards per step), step_s,
tokens_per_s (all sequences of the batch), scored_by, kv_tokens (KV-cache tokens one GPU holds beside
the weights of the target and the setup's drafter, `simulator.memory`), fits (the batch's sequences,
at the end of their generation with a step's query tokens, fit in them), heldout_error and verdict
(`confidence`; DOES_NOT_FIT where the configuration does not fit). Beside the setup's columns,
`acceptance_source` says whether its acceptance was recorded or ASSUMED (`calibrate.assumed`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

import methods
from calibrate.assumed import ASSUMED, is_assumed
from profiles.profile import Profile
from common.errors import InputError
from common.seeds import derive_seed
from costmodel import uncertainty
from costmodel.step import step_cost, step_seconds
from methods.spec import Setup, plain_shape
from costmodel.hardware import get_hardware
from traces.replay import replayable, TokenTable, replay_summary
from traces.schema import read_trace
from simulator.memory import memory_of
from simulator.stream import prepare_stream, run_stream

TABULATE_MIN = 4096      # forwards asked at once from which integer token counts are priced on a table
SCORE_COLUMNS = ["speedup", "tokens_per_step", "verified_per_step", "draft_cost", "draft_forwards",
                 "step_s", "tokens_per_s", "ctx_len", "scored_by", "kv_tokens", "fits", "heldout_error", "verdict"]
DOES_NOT_FIT = "does not fit"       # the verdict of a configuration whose sequences do not fit in memory


@dataclass(frozen=True)
class Setting:
    """What every configuration is scored at."""

    temperature: float | None = None    # None: each profile's lowest recorded temperature
    batch: int = 1
    ctx_len: int = 512
    dataset: str | None = None          # None: MT-Bench where recorded, else the first listed
    token_trace: str | None = None
    new_tokens: int | None = None       # tokens generated per request (None: a steady state)


@dataclass
class ScoreTask:
    """A chunk of one method's space on one setup, scored by `score_task` (all picklable): what the
    estimate measures a row's cost on (`sweep.estimate.measure`); the sweep's own tasks are a whole
    (profile, method), `sweep.run.SpaceTask`."""

    profile: Profile
    method: str
    base: dict[str, Any]          # the setup's drafter and acceptance key (`Setup.base`)
    configs: pd.DataFrame
    setting: Setting


@dataclass
class SimTask:
    """One executor task: re-score one configuration in the simulator with `repeats` seeds."""

    profile: Profile
    method: str
    config: dict[str, Any]        # the method's config fields plus the setup keys (`sim_config`)
    setting: Setting
    seed: int
    n_tokens: int                 # tokens each stream's decode steps commit (the closed form's new_tokens)
    repeats: int


# ---- hardware ----------------------------------------------------------------------------------

def check_recorded(profiles, temperature: float | None, dataset: str | None) -> None:
    """InputError listing what the profiles record when --temperature or --dataset names something
    none of them has acceptance for (before any space is built)."""
    if dataset is not None:
        known = sorted({d for p in profiles for d in p.datasets()})
        if dataset not in known:
            raise InputError(f"--dataset '{dataset}' is recorded by none of the profiles (recorded: {', '.join(known)})")
    if temperature is not None:
        known_t = sorted({t for p in profiles for t in p.temperatures()})
        if not any(abs(temperature - t) < 1e-9 for t in known_t):
            raise InputError(f"--temperature {temperature:g} is recorded by none of the profiles (recorded: "
                             f"{', '.join(f'{t:g}' for t in known_t)})")


def check_hardware(name: str) -> str:
    """The canonical hardware name; InputError listing the known ones."""
    try:
        return get_hardware(name).name
    except ValueError as exc:
        raise InputError(str(exc)) from None


# ---- which drafter and acceptance model a method uses ------------------------------------------

def temperature_for(profile: Profile, setting: Setting) -> float:
    """The requested temperature, or (when none was asked) the profile's lowest recorded one."""
    if setting.temperature is not None:
        return float(setting.temperature)
    return (profile.temperatures() or [0.0])[0]


def replays(method: str, setting: Setting, setup: Setup | None = None) -> bool:
    """Whether `method` is scored by exact greedy replay of the setting's TokenTrace: a method that
    replays, on the drafter that recorded the trace (any drafter when `setup` is not given)."""
    if not setting.token_trace or method not in replayable():
        return False
    return setup is None or trace_drafter_is(_token_trace(setting.token_trace)[1], setup.profile, setup.drafter)


@functools.lru_cache(maxsize=8)
def _token_trace(path: str):
    """(frame, metadata) of a TokenTrace, read once per process."""
    return read_trace(path, kind="token")


def trace_drafter_is(meta, profile: Profile, drafter: str | None) -> bool:
    """Whether the TokenTrace's drafter is the Profile drafter `drafter` (its name, model or file)."""
    if drafter is None:
        return False
    recorded = str(meta.models.get("drafter", ""))
    names = {drafter} | (profile.drafter(drafter).names() if drafter in profile.drafters else set())
    return any(n and (recorded == n or recorded.endswith("/" + str(n))) for n in names)


def check_token_trace(path: str, profiles: list[Profile], dataset: str | None) -> str | None:
    """Refuse a TokenTrace recorded on another target than every profile prices (by architecture
    where the trace's model spec names one, else by vocabulary), or on another dataset than
    --dataset; returns the profile dataset the trace was recorded on (its rows' label), if named."""
    from runtime.models import architecture_of  # here, not at the top: runtime imports torch, which scoring never needs
    frame, meta = _token_trace(path)
    target = str(meta.models.get("target", ""))
    arch = architecture_of(target)
    top_token = int(frame["token"].max()) if len(frame) else None
    for profile in profiles:
        if arch is not None and arch != profile.target:
            raise InputError(f"--token-trace {path} was recorded on target '{target}' ({arch}); profile "
                             f"'{profile.name}' prices '{profile.target}': pass --profile files of that target")
        vocab = getattr(profile.models[profile.target], "vocab", None)
        if arch is None and vocab and top_token is not None and top_token >= int(vocab):
            raise InputError(f"--token-trace {path} holds token id {top_token}, outside the {int(vocab)}-token "
                             f"vocabulary of profile '{profile.name}': it was recorded on another target")
        if not any(trace_drafter_is(meta, profile, d) for d in profile.drafters):
            raise InputError(f"--token-trace {path} was recorded with drafter '{meta.models.get('drafter')}', "
                             f"which profile '{profile.name}' does not name (its drafters: {', '.join(profile.drafters)})")
    if not meta.dataset:
        return dataset
    recorded = sorted({d for p in profiles if (d := p.dataset_named(meta.dataset))})
    if dataset is not None and dataset not in recorded:
        raise InputError(f"--token-trace {path} was recorded on dataset '{meta.dataset}', not --dataset '{dataset}'")
    return dataset if dataset is not None else (recorded[0] if recorded else None)


def setups(profile: Profile, method: str, setting: Setting) -> list[Setup]:
    """Every (drafter, acceptance entry) `method` runs with on `profile` at `setting`
    (`Profile.setups_for`); InputError saying why when there is none."""
    found = profile.setups_for(methods.get(method), temperature=setting.temperature, dataset=setting.dataset)
    if replays(method, setting) and temperature_for(profile, setting) > 0:
        raise InputError(f"{method} on '{profile.name}': exact trace replay is greedy only; "
                         "use --temperature 0 with --token-trace")
    return found


def setup_of(profile: Profile, base: dict[str, Any]) -> Setup:
    """The Setup a `Setup.base` dict names (what travels in a task)."""
    return Setup(profile, base.get("drafter"), base["acceptance"])


# ---- the task functions ------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _token_table(path: str):
    return TokenTable.from_frame(_token_trace(path)[0])


def score(setup: Setup, method: str, configs: pd.DataFrame, setting: Setting) -> pd.DataFrame:
    """`configs` (a frame of `method`'s configurations) with the setup columns and SCORE_COLUMNS."""
    return at_batch(predicted(setup, method, configs, setting), setting.batch)


@dataclass(frozen=True)
class Predicted:
    """What a configuration's score takes from its method, the same at every batch size: its tokens
    per step and the forwards of its step (`predicted`); `at_batch` prices them at one batch."""

    setup: Setup
    method: str
    configs: pd.DataFrame
    setting: Setting
    tokens: np.ndarray
    shape: Any                  # costmodel.step.StepShape
    scored_by: str


def predicted(setup: Setup, method: str, configs: pd.DataFrame, setting: Setting) -> Predicted:
    """The batch-free part of scoring `configs`: tokens per step (closed form, or a TokenTrace's
    exact replay) and the priced shape of a step. Scoring at several batch sizes computes it once."""
    spec = methods.get(method)
    setup = replace(setup, new_tokens=setting.new_tokens)
    try:
        tokens = np.asarray(spec.expected_tokens(setup, configs), dtype=float)
        shape = spec.priced_shape(setup, configs)
    except InputError:
        raise
    except ValueError as exc:   # costmodel's one-line input errors
        raise InputError(f"{method} on '{setup.profile.name}' ({setup.acceptance_key}): {exc}") from None
    scored_by = "closed form"
    if replays(method, setting, setup):
        tokens = replay_tokens(_token_table(setting.token_trace), method, configs)
        scored_by = "trace replay"
    return Predicted(setup, method, configs, setting, tokens, shape, scored_by)


def at_batch(part: Predicted, batch: int) -> pd.DataFrame:
    """`part`'s configurations scored at `batch` sequences decoding together: the step's cost, the
    speedup over plain decoding at that batch, memory and the verdict (SCORE_COLUMNS);
    `profiles.latency.PastMeasuredBatch` where the Profile's latency tables stop short of it."""
    setup, setting, tokens, shape, configs = part.setup, part.setting, part.tokens, part.shape, part.configs
    profile = setup.profile
    latency, ctx = tabulated(profile.seconds), float(setting.ctx_len)
    first = tokens / setting.new_tokens if setting.new_tokens else 0.0     # the share of steps that are a first
    cost = step_cost(latency, shape, ctx, batch, prompt_len=centred_prompt(ctx, setting.new_tokens or 0),
                     first_share=first)
    draft_s, step_s = cost.draft_s, cost.total
    baseline = float(step_seconds(latency, plain_shape(profile), ctx, batch)[0])
    acceptance = profile.acceptance_model(setup.acceptance_key)
    columns = {"profile": profile.name, "method": part.method, "target": profile.target,
               "drafter": setup.drafter or "-", "dataset": acceptance.dataset, "temperature": acceptance.temperature,
               "acceptance": setup.acceptance_key, "acceptance_source": acceptance_source(acceptance),
               **{c: configs[c] for c in configs.columns},
               "speedup": tokens * baseline / step_s, "tokens_per_step": tokens,
               "verified_per_step": np.broadcast_to(np.asarray(shape.verify_tokens, dtype=float), tokens.shape),
               "draft_cost": draft_s / baseline, "draft_forwards": shape.drafted, "step_s": step_s,
               "tokens_per_s": batch * tokens / step_s, "ctx_len": ctx, "scored_by": part.scored_by}
    kv = kv_tokens(profile, setup.drafter)
    verified = np.asarray(columns["verified_per_step"], dtype=float)
    fits = kv >= batch * (ctx + (setting.new_tokens or 0) / 2.0 + np.ceil(verified)) if kv == kv else True
    columns.update(kv_tokens=kv, fits=np.broadcast_to(fits, tokens.shape))
    judged = confidence(tokens * baseline / step_s, profile.heldout_error())
    judged["verdict"] = np.where(columns["fits"], judged["verdict"], DOES_NOT_FIT)
    columns.update(judged)
    return pd.DataFrame(columns, index=configs.index)    # built once: no per-column inserts


def acceptance_source(entry) -> str:
    """ASSUMED where the acceptance entry was carried from another target or drafter, else recorded."""
    return ASSUMED if is_assumed(entry) else "recorded"


def kv_tokens(profile: Profile, drafter: str | None) -> float:
    """KV-cache tokens one GPU of the profile's hardware holds beside the weights of the target and
    `drafter` (0 when they leave none; NaN when the hardware's memory is unknown)."""
    try:
        return float(memory_of(profile, drafter).capacity_tokens)
    except InputError:
        return float("nan")


def memory_note(profile: Profile, drafter: str | None) -> str:
    """The memory arithmetic of the profile's target with `drafter`, in words (`simulator.memory`)."""
    return memory_of(profile, drafter).describe()


def confidence(speedup: np.ndarray, error: float | None) -> dict[str, Any]:
    """The Profile's held-out error beside a predicted speedup and the verdict it allows:
    "speculate" only when the predicted gain exceeds the error, "don't" when the loss does,
    "tie" within it (no error known: the plain comparison with 1)."""
    err = 0.0 if error is None else float(error)
    return {"heldout_error": np.nan if error is None else err, "verdict": uncertainty.verdict(speedup, err)}


def speedup_intervals(profile: Profile, datasets, method_names, speedup, tokens_per_step,
                      prompts=None) -> dict[str, np.ndarray]:
    """Per row: the 90% interval of the speedup measured over `prompts` prompts (None: a deployment's
    long run) and the prompts a run needs to tell the configuration from plain decoding
    (`costmodel.uncertainty`: the Profile's held-out error; its datasets' prompt spread per method,
    where recorded: no prompt count without it)."""
    sd, calibration = _prompt_terms(profile, datasets, method_names, tokens_per_step)
    half = uncertainty.half_width(profile.heldout_error() or 0.0, sd, prompts, calibration)
    low, high = uncertainty.interval(speedup, half)
    plain = np.asarray([m == methods.BASELINE for m in method_names])
    need = np.where(np.isnan(sd) | plain, np.nan, uncertainty.prompts_to_resolve(speedup, sd))
    return {"speedup_lo": low, "speedup_hi": high, "prompts_to_confirm": need}


def prompt_sampling(profile: Profile, datasets, method_names, tokens_per_step, prompts) -> np.ndarray:
    """Per row: the part of the 90% half-width that which prompts were run gives alone (`prompts` of them
    measured, the Profile's calibration prompts behind the acceptance), without the step model's error,
    as the Profile's spread states it (`calibrate.spread`); NaN where it recorded no spread of the dataset."""
    sd, calibration = _prompt_terms(profile, datasets, method_names, tokens_per_step)
    return np.where(np.isnan(sd), np.nan, uncertainty.half_width(0.0, sd, prompts, calibration))


def _prompt_terms(profile: Profile, datasets, method_names, tokens_per_step) -> tuple[np.ndarray, list[float]]:
    """(one prompt's relative standard deviation per row, the prompts each was measured on): the
    Profile's prompt spread of each (dataset, method) (`Profile.prompt_spread`; NaN and infinitely many
    where it recorded none)."""
    spread = [profile.prompt_spread(d, m) for d, m in zip(datasets, method_names)]
    sd = uncertainty.prompt_sd(tokens_per_step, [np.nan if s is None else s[0] for s in spread])
    return sd, [np.inf if s is None else s[1] for s in spread]


def tabulated(latency):
    """`latency` (costmodel.step's callable) priced once per distinct integer token count: a space
    asks the same few draft widths (1..64 sequences, at ctx + 0..D-1) for 10^5 configurations at
    once, so those are evaluated on a small table and gathered (the same values, several times
    faster). Anything else goes to `latency` as it is."""
    def seconds(model, n_tokens, ctx, batch=1):
        n, c = np.asarray(n_tokens), np.asarray(ctx, dtype=float)
        if n.dtype.kind in "iu" and n.size >= TABULATE_MIN and (c.ndim == 0 or c.shape == n.shape[-1:]):
            lo, hi = int(n.min()), int(n.max())
            if hi - lo < n.size // 8:
                grid = np.arange(lo, hi + 1)
                if c.ndim == 0:
                    return latency(model, grid, c, batch)[n - lo]
                return latency(model, grid[:, None], c[None, :], batch)[n - lo, np.arange(c.shape[0])]
        return latency(model, n_tokens, ctx, batch)
    return seconds


def replay_tokens(table, method: str, configs: pd.DataFrame) -> np.ndarray:
    """Mean accepted length of every configuration by exact greedy replay of a TokenTrace."""
    return replay_summary(table, method, methods.get(method).configs_of(configs))["mean_accepted"].to_numpy(float)


def score_task(task: ScoreTask) -> pd.DataFrame:
    """Score one chunk."""
    return score(setup_of(task.profile, task.base), task.method, task.configs, task.setting)


def sim_config(row: pd.DataFrame) -> dict[str, Any]:
    """A scored row (a one-row frame) as the simulator's config: the method's fields
    (`spec.configs_of`) plus the setup keys drafter and acceptance."""
    spec = methods.get(str(row["method"].iloc[0]))
    config = spec.configs_of(row)[0].to_dict()
    drafter = row["drafter"].iloc[0] if "drafter" in row else None
    if isinstance(drafter, str) and drafter != "-":
        config["drafter"] = drafter
    config["acceptance"] = str(row["acceptance"].iloc[0])
    return config


def centred_prompt(ctx_len: float, new_tokens: int) -> int:
    """The prompt length that centres a generation of `new_tokens` on `ctx_len` (the closed form
    prices every step there; the simulated stream's context grows by its tokens)."""
    return max(1, int(ctx_len) - int(new_tokens) // 2)


def simulate_task(task: SimTask) -> dict[str, float]:
    """Executor entry point: the simulator's speedup over `repeats` seeded streams: plain decoding's
    total time over the streams' total (tokens/s over all of them, as a measurement pools its
    prompts; a mean of per-stream ratios leans high where streams vary), and the per-stream p05, p95."""
    profile = task.profile
    # decode steps commit all n_tokens, as the engine's do (its prefill leaves the prompt's last
    # token pending) and as the closed form prices them; simulate_stream's prefill emits one more
    prompt = centred_prompt(task.setting.ctx_len, task.n_tokens)
    stream = prepare_stream(profile, task.method, task.config, n_tokens=task.n_tokens + 1, prompt_len=prompt)
    summaries = [run_stream(stream, derive_seed(task.seed, "repeat", r)).summary for r in range(task.repeats)]
    s = np.array([x["speedup"] for x in summaries])
    ar, decode = (np.array([x[k] for x in summaries]) for k in ("ar_decode_s", "decode_s"))
    pooled = ar.sum() / decode.sum()
    return {"sim_speedup": float(pooled), "sim_se": pooled_ratio_se(ar, decode),
            "sim_p05": float(np.quantile(s, 0.05)), "sim_p95": float(np.quantile(s, 0.95)),
            "sim_tokens_per_step": float(np.mean([x["tokens_per_step"] for x in summaries]))}


def pooled_ratio_se(num: np.ndarray, den: np.ndarray) -> float:
    """Relative standard error of sum(num) / sum(den) over independent streams (the delta
    method): the simulator's own seed noise, against which its gap to the closed form is judged."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if len(num) < 2:
        return float("nan")
    ratio = num.sum() / den.sum()
    return float(np.std(num - ratio * den, ddof=1) / np.sqrt(len(num)) / num.mean())

