"""prompt_lookup: prompt-lookup decoding, no drafter: the context's last n tokens (the longest n in
n_min..n_max that occurred before) are matched against the prompt and what was generated, and the
up to gamma tokens that followed their earliest occurrence are verified as one chain (vLLM's
`ngram` with `prompt_lookup_min/max`, SGLang's `NGRAM`, transformers' `prompt_lookup_num_tokens`).

Acceptance is a part of its own, a two-state chain over steps (copying an earlier stretch, or
writing new text) with every sweep configuration's exact replay beside it: `methods.match_chain`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from common.errors import InputError
from costmodel.step import StepShape
from methods.config import Int, MethodConfig, param
from methods.engines import HF_PROMPT_LOOKUP, EngineConfig, sglang_requires, vllm_requires
from methods.match_chain import (PARAMETERS, MatchAcceptance, MatchSampler, at_bound, chain_at, fit_matches,
                                 fitted_to_replay, replay_table, replayed_at)
from methods.assumed import AssumedDrafter
from methods.spec import MethodSpec, PlotSpec

GAMMAS = tuple(range(1, 11))          # the sweep's draft lengths
NGRAMS = tuple(range(1, 7))           # the sweep's match lengths


@dataclass(frozen=True)
class PromptLookupConfig(MethodConfig):
    method = "prompt_lookup"
    gamma: int = param(Int("g", "tokens proposed after a match", low=1, high=64), 4)
    n_min: int = param(Int("nmin", "shortest n-gram matched", low=1, high=32), 1)
    n_max: int = param(Int("nmax", "longest n-gram matched (the longest that matches is used)", low=1, high=32), 3)

    def validate(self):
        if self.n_min > self.n_max:
            raise InputError(f"prompt_lookup: n_min ({self.n_min}) exceeds n_max ({self.n_max})")




class PromptLookup(MethodSpec):
    name, config, summary = "prompt_lookup", PromptLookupConfig, "n-gram match in the context, no drafter"
    needs = "prompt_lookup"
    decoder = "runtime.engine.prompt_lookup:PromptLookup"
    replays_from_outputs = True     # traces.lookup_replay: its steps from a prompt and a greedy output alone
    calibration = ("prompt_lookup g2 nmin1 nmax1", "prompt_lookup g4 nmin2 nmax2", "prompt_lookup g6 nmin3 nmax3",
                   "prompt_lookup g4 nmin4 nmax4", "prompt_lookup g4 nmin1 nmax3", "prompt_lookup g8 nmin2 nmax4",
                   "prompt_lookup g4 nmin3 nmax5")     # n_min = n_max fixes the match length: hit and first by length
    campaign = ("prompt_lookup g3 nmin1 nmax3", "prompt_lookup g5 nmin2 nmax4")
    batch_calibration = ("prompt_lookup g2 nmin2 nmax3", "prompt_lookup g5 nmin2 nmax3", "prompt_lookup g8 nmin2 nmax3")
    plot = PlotSpec(x="gamma", hue="n_max")
    engine_offered, aliases = True, ("ngram",)      # vLLM's name

    def assumed_drafters(self, target, arch):
        """No model (a step is one verify of the proposals; the lookup is host work); acceptance depends
        on how much the data copies: vLLM's n-gram proposer replayed on Llama-3.1-8B-Instruct's outputs
        (SpecDecode-Bench), per dataset where the study has it, else on ShareGPT (chat); the study's
        replay of its own window's configurations stays with its target, the fitted chain is carried."""
        return {self.name: AssumedDrafter({"kind": self.name}, None, "llama-3.1-8b-h100-vllm", self.name, "sharegpt",
                                          "the acceptance of vLLM's n-gram proposer (window 3-7) replayed on "
                                          "Llama-3.1-8B-Instruct's outputs (SpecDecode-Bench)")}

    def carried_part(self, part):
        """The fitted chain alone: the replays and their shape by answer length are of the donor's own
        generations."""
        return replace(part, replayed=None, replayed_new_tokens=None, length_shape=None, length_prompts=None)

    def drafters(self, arch):
        return {self.name: {"kind": self.name}}        # no model: the entry holds its own acceptance

    def space(self, setup, gammas=GAMMAS, ngrams=NGRAMS):
        """Every (gamma, n_min <= n_max), n_min where the entry's chain prices it (`MatchAcceptance.prices`:
        a chain fitted at one match length, as vLLM's window 3-7, says nothing of the others)."""
        priced = self._part(setup).prices(ngrams) if self._has_part(setup) else np.ones(len(ngrams), bool)
        mins = [n for n, ok in zip(ngrams, priced) if ok]
        rows = [(g, lo, hi) for g in gammas for lo in mins for hi in ngrams if lo <= hi]
        frame = pd.DataFrame(rows, columns=["gamma", "n_min", "n_max"]).astype(np.int64)
        frame["config"] = self.config.labels(frame)
        return frame

    def _has_part(self, setup) -> bool:
        """Whether the setup's acceptance entry holds this method's chain (a campaign replaying recorded
        steps may price without one, or list the space without a setup)."""
        return setup is not None and bool(setup.acceptance_key) and setup.acceptance.has(self.name)

    def _part(self, setup) -> MatchAcceptance:
        return setup.need(self.name, self.name)

    def _columns(self, frame):
        return (frame[c].to_numpy(np.int64) for c in ("n_min", "n_max", "gamma"))

    def expected_tokens(self, setup, frame):
        """The entry's replay where it holds the configuration, else the chain (module docstring)."""
        tokens, _ = replayed_at(self._part(setup), self.config.labels(frame), *self._columns(frame), setup.new_tokens)
        return tokens

    def step_shape(self, setup, frame):
        """One target forward of the pending token, and of the gamma proposals when a match was found
        (every step, where the acceptance entry has no part of this method: a campaign that replays
        recorded steps prices each at its own tokens)."""
        n_min, n_max, gamma = self._columns(frame)
        if self._has_part(setup):
            _, found = replayed_at(self._part(setup), self.config.labels(frame), n_min, n_max, gamma, setup.new_tokens)
        else:
            found = np.ones(len(frame))
        tokens = np.stack([np.ones(len(frame)), 1.0 + gamma], axis=1)
        prob = np.stack([1.0 - found, found], axis=1)
        return StepShape(setup.target, 1.0 + found * gamma, draft_width=np.zeros((len(frame), 0), dtype=np.int64),
                         overhead_s=setup.overhead_s, verify_dist=(tokens, prob))

    def sampler(self, setup, config, new_tokens=None, **options):
        return MatchSampler(config, fitted_to_replay(self._part(setup), config, new_tokens))

    def acceptance_part(self, raw, where, part=None):
        needed = [k for k in PARAMETERS if k != "catch"]     # catch: 1 where a Profile predates it
        if not isinstance(raw, dict) or any(k not in raw for k in needed):
            raise InputError(f"{where}: {self.name} needs {', '.join(repr(k) for k in needed)}")
        for key in PARAMETERS:
            value = raw.get(key, 1.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise InputError(f"{where}: {self.name}.{key} must be a probability in [0, 1], got {value!r}")
        replayed, length = raw.get("replayed"), raw.get("replayed_new_tokens")
        if replayed is not None:
            if not isinstance(replayed, dict) or not isinstance(length, int) or length < 1:
                raise InputError(f"{where}: {self.name}.replayed needs a mapping of configuration labels and "
                                 "replayed_new_tokens, a whole number >= 1")
            pairs = {label: self._pair(pair, where, "replayed", label) for label, pair in replayed.items()}
            replayed = {self.parse(label).label: pair for label, pair in pairs.items()}
        shape, prompts = raw.get("length_shape"), raw.get("length_prompts")
        if shape is not None:
            if replayed is None or not isinstance(shape, dict) or len(shape) < 2:
                raise InputError(f"{where}: {self.name}.length_shape needs a replay and two or more lengths")
            if isinstance(prompts, bool) or not isinstance(prompts, int) or prompts < 1:
                raise InputError(f"{where}: {self.name}.length_prompts must be a whole number >= 1, got {prompts!r}")
            shape = {self._length(n, where): {label: self._pair(pair, where, f"length_shape['{n}']", label)
                                              for label, pair in table.items()} for n, table in shape.items()}
            shape = {n: {self.parse(label).label: pair for label, pair in table.items()} for n, table in shape.items()}
        fitted = raw.get("n_min_fitted")
        if fitted is not None and (not isinstance(fitted, list) or not fitted or any(
                isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in fitted)):
            raise InputError(f"{where}: {self.name}.n_min_fitted must be a list of match lengths >= 1, got {fitted!r}")
        return MatchAcceptance(**{k: float(raw.get(k, 1.0)) for k in PARAMETERS}, replayed=replayed,
                               replayed_new_tokens=length if replayed is not None else None,
                               length_shape=shape, length_prompts=prompts if shape is not None else None,
                               n_min_fitted=tuple(sorted(set(fitted))) if fitted is not None else None)

    @staticmethod
    def _length(text, where: str) -> int:
        try:
            n = int(text)
        except (TypeError, ValueError):
            n = 0
        if n < 1 or str(n) != str(text).strip():
            raise InputError(f"{where}: prompt_lookup.length_shape has length {text!r}; lengths are whole numbers >= 1")
        return n

    def _pair(self, pair, where: str, table: str, label: str) -> tuple[float, float]:
        if (not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(v, (int, float)) for v in pair)
                or pair[0] < 1 or not 0 <= pair[1] <= 1):
            raise InputError(f"{where}: {self.name}.{table}['{label}'] must be [tokens per step >= 1, "
                             f"a share in [0, 1]], got {pair!r}")
        return float(pair[0]), float(pair[1])

    def fit_steps(self, frame, *, dataset, temperature, source):
        """`MatchAcceptance` by maximum likelihood of every generation's steps (each in order, its
        last, cut at the length, left out) of two or more configurations, with each configuration's
        tokens per step predicted with it left out of the fit (`fit.configs`)."""
        steps = self._steps(frame, source)
        part = fit_matches(steps)
        configs = []
        for label, rows in steps.groupby("config"):
            held = fit_matches(steps[steps["config"] != label], starts=2)
            config = self.parse(label)
            new_tokens = int(round(rows.groupby(["run_id", "prompt_id"])["accepted"].sum().mean()))
            predicted = float(chain_at(held, config.n_min, config.n_max, config.gamma, new_tokens)[0][0])
            configs.append({"config": label, "steps": int(len(rows)), "tokens_per_step": round(float(rows["accepted"].mean()), 4),
                            "heldout_tokens_per_step": round(predicted, 4)})
        errors = [abs(c["heldout_tokens_per_step"] / c["tokens_per_step"] - 1.0) for c in configs]
        return {"drafter": self.name, "temperature": float(temperature), "dataset": dataset, "alpha": part.alpha,
                self.name: {**{k: round(v, 6) for k, v in part.parameters().items()},
                            "n_min_fitted": sorted(int(n) for n in steps["n_min"].unique())},
                "fit": {"model": "copy or free text, a two-state chain over steps (methods.prompt_lookup)",
                        "configs": configs,
                        "at_bound": at_bound(part),
                        "heldout_error_median": round(float(np.median(errors)), 4),
                        "heldout_error_max": round(float(np.max(errors)), 4)},
                "source": f"{source}: maximum likelihood over every measured step"}

    def fit_replayed(self, frame, *, dataset, temperature, source):
        """`fit_steps` on the calibration configurations among `frame`'s, steps replayed on greedy
        outputs (traces.lookup_replay), with every configuration's replay in the entry (`replayed`,
        module docstring)."""
        steps = self._steps(frame, source)
        calibration = {c.label for c in self.calibration_configs()}
        missing = sorted(calibration - set(steps["config"]))
        if missing:
            raise InputError(f"{source}: the replay lacks calibration configuration '{missing[0]}'")
        entry = self.fit_steps(frame[steps["config"].isin(calibration).to_numpy()], dataset=dataset,
                               temperature=temperature, source=source)
        entry[self.name]["replayed"] = replay_table(steps)
        entry[self.name]["replayed_new_tokens"] = int(round(steps.groupby(["config", "run_id", "prompt_id"])["accepted"]
                                                            .sum().mean()))
        return entry

    def _steps(self, frame, source) -> pd.DataFrame:
        rows = frame[frame["method"] == self.name].copy()
        parsed = {text: self.parse(text) for text in rows["config"].unique()}     # once per configuration
        labels = {c.label for c in parsed.values()}
        if len(labels) < 2:
            raise InputError(f"{source}: fitting {self.name} needs two or more configurations, got {len(labels)}")
        text = rows["config"]
        rows["config"] = text.map({t: c.label for t, c in parsed.items()})
        rows["n_min"] = text.map({t: c.n_min for t, c in parsed.items()})
        rows["n_max"] = text.map({t: c.n_max for t, c in parsed.items()})
        rows["drafted"] = rows["verify_tokens"].astype(np.int64) - 1
        rows["hits"] = np.minimum(rows["accepted"].astype(np.int64) - 1, rows["drafted"])
        return rows

    def to_engine(self, engine, setup, config):
        c = config
        if engine == "vllm":
            return EngineConfig("vllm", {"method": "ngram", "num_speculative_tokens": c.gamma, "prompt_lookup_min": c.n_min,
                                         "prompt_lookup_max": c.n_max}, "exact", requires=vllm_requires("ngram"))
        if engine == "sglang":
            return EngineConfig("sglang", {"--speculative-algorithm": "NGRAM", "--speculative-num-draft-tokens": c.gamma + 1,
                                           "--speculative-ngram-min-match-window-size": c.n_min,
                                           "--speculative-ngram-max-match-window-size": c.n_max,
                                           "--speculative-ngram-min-bfs-breadth": 1,
                                           "--speculative-ngram-max-bfs-breadth": 1}, "approximate",
                                "SGLang's n-gram cache also holds other requests' tokens and proposes from a trie of "
                                "them, not only the earliest match in this request's own context",
                                requires=sglang_requires("NGRAM"))
        settings = {"prompt_lookup_num_tokens": c.gamma, "max_matching_ngram_size": c.n_max}   # generate() options
        if c.n_min == 1:
            return EngineConfig("hf", settings, "exact", requires=HF_PROMPT_LOOKUP)
        return EngineConfig("hf", settings, "approximate",
                            f"transformers falls back to matches shorter than n_min={c.n_min}, down to one token",
                            requires=HF_PROMPT_LOOKUP)


SPEC = PromptLookup()
ORDER = 8
