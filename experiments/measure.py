"""Engine measurements to trust: configurations x prompts x repeats on one loaded target, interleaved.

Used by the SmolLM2 calibration recordings and by `experiments.fidelity`, so the data a Profile is
calibrated on and the data it is judged against are measured the same way:
- one process, one loaded target, one decoder per configuration (built and warmed up first);
- torch threads pinned (`threads`); every decoder warms up on a short generation before timing;
- repeats rotate the order of the configurations (repeat r starts at configuration r), so drift of
  the machine (thermal, other load) hits every configuration alike;
- each generation's wall clock comes from the engine (`Generation.seconds`), each step's parts
  from its StepRecords, which become StepTrace rows (`run_id` = configuration label and repeat).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

import methods
from common.errors import InputError
from methods import MethodConfig


@dataclass(frozen=True)
class Candidate:
    """One configuration as the engine runs it (`config`) on a Profile drafter (None: no drafter)."""

    config: MethodConfig
    drafter: str | None = None

    @property
    def method(self) -> str:
        return self.config.method

    @property
    def label(self) -> str:
        return self.config.label + (f" @{self.drafter}" if self.drafter else "")


def parse_candidate(text: str) -> Candidate:
    """'sd g4 @vanilla' (a method's label, then the Profile drafter it runs on, if any) -> Candidate."""
    label, _, drafter = text.partition("@")
    return Candidate(methods.parse_label(label.strip()), drafter.strip() or None)


class Bench:
    """A loaded target and the decoders of the candidates, each drafter loaded once."""

    def __init__(self, target: str, drafters: dict[str, dict[str, Any]], drafters_dir: Path, threads: int = 2,
                 seed: int = 0):
        """`drafters`: name -> spec as a Profile holds them (a spec's "file" is relative to `drafters_dir`)."""
        import torch

        from runtime.models import load_model

        torch.set_num_threads(threads)
        self.drafters, self.drafters_dir, self.seed, self.threads = drafters, Path(drafters_dir), seed, threads
        self.target = load_model(target)
        self.eos = getattr(self.target.tokenizer, "eos_token_id", None)
        self._drafters: dict[str, Any] = {}
        self._decoders: dict[str, Any] = {}

    def drafter_file(self, name: str) -> Path | None:
        """The trained file of drafter `name`; None when its spec names none (an untrained drafter)."""
        if name not in self.drafters:
            raise InputError(f"unknown drafter '{name}' (known: {', '.join(sorted(self.drafters)) or 'none'})")
        spec = self.drafters[name]
        if "file" not in spec:
            return None
        path = self.drafters_dir / spec["file"]
        if not path.is_file():
            raise InputError(f"trained drafter '{name}' not found at {path} (python -m training ...)")
        return path

    def _drafter_argument(self, cand: Candidate) -> Any:
        from runtime.engine.__main__ import load_drafter, own_drafter_methods

        if cand.drafter is None:
            return None
        path = self.drafter_file(cand.drafter)
        if cand.method in own_drafter_methods():
            return None if path is None else str(path)
        if path is None:
            raise InputError(f"method {cand.method} needs a trained draft model; drafter '{cand.drafter}' names no file")
        if cand.drafter not in self._drafters:
            self._drafters[cand.drafter] = load_drafter(str(path), self.target).model
        return self._drafters[cand.drafter]

    def decoder(self, cand: Candidate):
        from runtime.engine import make_decoder

        if cand.label not in self._decoders:
            self._decoders[cand.label] = make_decoder(cand.method, self.target.model, self._drafter_argument(cand),
                                                      seed=self.seed, **cand.config.to_dict())
        return self._decoders[cand.label]

    def encode(self, prompts) -> list[tuple[str, str, list[int]]]:
        """(prompt set, prompt id, token ids) of traces.prompts Prompts."""
        from traces.prompts import encode_prompt

        return [(p.dataset, p.prompt_id, list(encode_prompt(p, self.target.tokenizer))) for p in prompts]

    def measure(self, cands: Sequence[Candidate], prompts: Sequence[tuple[str, str, list[int]]], *, repeats: int,
                max_new_tokens: int, log: Callable[[str], None] = print) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(one row per generation: candidate, repeat, dataset, prompt, tokens, seconds (prefill
        included), decode_s (its steps alone), steps; StepTrace rows of every step, with the
        candidate's label and dataset)."""
        from traces.record import output_steps

        decoders = [self.decoder(c) for c in cands]              # built before any timing
        for dec in decoders:                                       # warm-up, untimed
            dec.generate(prompts[0][2], 8, self.eos)
        runs, steps = [], []
        started = time.perf_counter()
        for r in range(repeats):
            order = list(range(len(cands)))
            order = order[r % len(order):] + order[: r % len(order)]
            for i in order:
                cand, dec = cands[i], decoders[i]
                config = json.dumps(cand.config.to_dict(), sort_keys=True)
                for dataset, pid, ids in prompts:
                    out = dec.generate(ids, max_new_tokens, self.eos)
                    runs.append({"candidate": cand.label, "method": cand.method, "drafter": cand.drafter or "-",
                                 "repeat": r, "dataset": dataset, "prompt_id": pid, "tokens": len(out.tokens),
                                 "seconds": out.seconds, "steps": len(out.steps),
                                 "decode_s": sum(st.draft_s + st.verify_s + st.overhead_s for st in out.steps)})
                    for s, accepted in output_steps(out):
                        steps.append({"candidate": cand.label, "dataset": dataset, "run_id": f"{cand.label}#{r}",
                                      "method": cand.method, "config": config, "prompt_id": pid, "step": s.step,
                                      "ctx_len": s.ctx_len, "draft_forwards": s.draft_forwards, "draft_s": s.draft_s,
                                      "verify_tokens": s.verify_tokens, "verify_s": s.verify_s,
                                      "overhead_s": s.overhead_s, "accepted": accepted,
                                      "accept_mask": list(s.accept_mask), "confidences": list(s.confidences),
                                      "mode": s.mode})
            log(f"repeat {r + 1}/{repeats} done ({time.perf_counter() - started:.0f} s)")
        return pd.DataFrame(runs), pd.DataFrame(steps)


def decode_seconds(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """`runs` with decode_s (the sum of each generation's step times) taken from its StepTrace rows,
    for runs recorded before measure() kept it."""
    keyed = steps.assign(repeat=steps["run_id"].str.rsplit("#", n=1).str[1].astype(int),
                         decode_s=steps["draft_s"] + steps["verify_s"] + steps["overhead_s"])
    total = keyed.groupby(["dataset", "candidate", "repeat", "prompt_id"])["decode_s"].sum()
    out = runs.drop(columns=["decode_s"], errors="ignore").merge(
        total.reset_index(), on=["dataset", "candidate", "repeat", "prompt_id"], how="left")
    if out["decode_s"].isna().any():
        raise InputError("the step traces do not cover every measured generation: decode times cannot be derived")
    return out


def rates(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, candidate, repeat): tokens, decode seconds (the steps alone: the prompt's
    prefill is the same work for every method and no step-cost model prices it), decode tokens/s,
    end-to-end tokens/s (prefill included) and the decode speedup over `ar` of the same dataset and
    repeat (measured back to back in the same rotation)."""
    if "decode_s" not in runs:
        raise InputError("the measured runs hold no decode_s (step times): derive it from their StepTraces")
    per = runs.groupby(["dataset", "candidate", "method", "drafter", "repeat"], sort=False).agg(
        tokens=("tokens", "sum"), seconds=("decode_s", "sum"), e2e_seconds=("seconds", "sum"),
        steps=("steps", "sum")).reset_index()
    per["tokens_per_s"] = per["tokens"] / per["seconds"]
    per["e2e_tokens_per_s"] = per["tokens"] / per["e2e_seconds"]
    ar = per[per["method"] == "ar"].set_index(["dataset", "repeat"])["tokens_per_s"]
    if ar.empty:
        raise InputError("the measured candidates hold no plain decoding (ar): speedups need it")
    per["speedup"] = per["tokens_per_s"] / ar.reindex(pd.MultiIndex.from_frame(per[["dataset", "repeat"]])).to_numpy()
    per["tokens_per_step"] = per["tokens"] / per["steps"]
    return per
