"""Engine measurements to trust: configurations x prompts x repeats on one loaded target, interleaved.

Used by the SmolLM2 calibration recordings and by `experiments.fidelity`, so the data a Profile is
calibrated on and the data it is judged against are measured the same way:
- one process, one loaded target, one decoder per configuration (built and warmed up first);
- torch threads pinned (`threads`); every decoder warms up on a short generation before timing;
- repeats rotate the order of the configurations (repeat r starts at configuration r), so drift of
  the machine (thermal, other load) hits every configuration alike;
- plain decoding (ar) runs on the same prompt right next to every other generation, first or
  second by turns (a pair, `traces.drift`): a speedup is a generation's tokens/s over its own
  partner's, so the machine's minute-to-minute drift cancels instead of moving every speedup;
- each generation's wall clock comes from the engine (`Generation.seconds`), each step's parts
  from its StepRecords, which become StepTrace rows (`run_id` = configuration label and repeat).

`Bench.measure_batches` measures batches the same way (the batch calibration recordings and
`experiments.fidelity --batch`): a run is every prompt decoded by the continuous-batching engine
(`runtime.engine.batch`) at batch B, beside plain decoding of the same prompts at the same B (its
pair); each run becomes one row (its tokens over its decode seconds, the steps' own times) and
BatchStepTrace rows (`traces.batch_record`).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from methods import BASELINE, MethodConfig
import methods
from common.errors import InputError
from runtime.drafters.vanilla import draft_vocab_of
from runtime.models import load_model, load_transformers
from runtime.engine.__main__ import load_drafter, own_drafter_methods
from runtime.engine import make_decoder
from runtime.engine.batch import BatchEngine
from campaigns.transformers_engine import TransformersDecoder, assistant_from_vanilla, check_same_tokenizer
from runtime.prompts import encode_prompt
from traces.batch_record import step_rows
from traces.record import output_steps
from traces.schema import step_wall_s


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


def entry_field(spec, key: str) -> Any:
    """A field of a Profile drafter entry, typed (`profiles.parts.Drafter`) or in its JSON form (None: absent)."""
    return spec.get(key) if isinstance(spec, dict) else getattr(spec, key, None)


def check_draft_vocab(name: str, spec, model, path) -> None:
    """Refuse a trained draft model whose draft vocabulary is not the one its Profile drafter was
    calibrated with (`draft_vocab` of the entry; 0 or absent: the whole vocabulary)."""
    kept = draft_vocab_of(model)
    have, want = 0 if kept is None else int(kept.numel()), int(entry_field(spec, "draft_vocab") or 0)
    if have != want:
        raise InputError(f"drafter '{name}' at {path} drafts over {have or 'every'} token(s); its Profile entry was "
                         f"calibrated with a draft vocabulary of {want or 'every token'}")


ENGINES = ("specsim", "transformers")


class Bench:
    """A loaded target and the decoders of the candidates, each drafter loaded once: this project's
    engine, or transformers' own generate (`campaigns.transformers_engine`)."""

    def __init__(self, target: str, drafters: dict[str, dict[str, Any]], drafters_dir: Path, threads: int = 2,
                 seed: int = 0, engine: str = "specsim"):
        """`drafters`: name -> entry as a Profile holds them (`profiles.parts.Drafter`, or its JSON form;
        an entry's file is relative to `drafters_dir`)."""
        if engine not in ENGINES:
            raise InputError(f"unknown engine '{engine}' (known: {', '.join(ENGINES)})")
        import torch

        torch.set_num_threads(threads)
        self.drafters, self.drafters_dir, self.seed, self.threads = drafters, Path(drafters_dir), seed, threads
        self.target = load_model(target)
        self.eos = getattr(self.target.tokenizer, "eos_token_id", None)
        self._drafters: dict[str, Any] = {}
        self._decoders: dict[str, Any] = {}
        self.engine, self.hf = engine, None
        if engine == "transformers":
            self.hf, _ = load_transformers(target)

    def drafter_file(self, name: str) -> Path | None:
        """The trained file of drafter `name`; None when its spec names none (an untrained drafter)."""
        if name not in self.drafters:
            raise InputError(f"unknown drafter '{name}' (known: {', '.join(sorted(self.drafters)) or 'none'})")
        file = entry_field(self.drafters[name], "file")
        if file is None:
            return None
        path = self.drafters_dir / file
        if not path.is_file():
            raise InputError(f"trained drafter '{name}' not found at {path} (python -m training ...)")
        return path

    def _drafter_argument(self, cand: Candidate) -> Any:
        if cand.drafter is None:
            return None
        path = self.drafter_file(cand.drafter)
        if cand.method in own_drafter_methods():
            return None if path is None else str(path)
        if path is None:
            raise InputError(f"method {cand.method} needs a trained draft model; drafter '{cand.drafter}' names no file")
        if cand.drafter not in self._drafters:
            model = load_drafter(str(path), self.target).model
            check_draft_vocab(cand.drafter, self.drafters[cand.drafter], model, path)
            self._drafters[cand.drafter] = model
        return self._drafters[cand.drafter]

    def decoder(self, cand: Candidate):
        if cand.label not in self._decoders and self.engine == "transformers":
            self._decoders[cand.label] = self._transformers_decoder(cand)
        if cand.label not in self._decoders:
            self._decoders[cand.label] = make_decoder(cand.method, self.target.model, self._drafter_argument(cand),
                                                      seed=self.seed, **cand.config.to_dict())
        return self._decoders[cand.label]

    def _transformers_decoder(self, cand: Candidate):
        assistant = None
        if cand.drafter is not None:
            key = f"transformers:{cand.drafter}"
            if key not in self._drafters:
                path = self.drafter_file(cand.drafter)
                if path is None:
                    raise InputError(f"drafter '{cand.drafter}' names no trained file to export to transformers")
                self._drafters[key] = assistant_from_vanilla(self.hf, path, self.target.model)
                check_same_tokenizer(self.target.tokenizer, self._drafters[key], cand.drafter)
            assistant = self._drafters[key]
        return TransformersDecoder(self.hf, cand.config, assistant, cand.drafter)

    def batch_engine(self, cand: Candidate, batch: int, context: int):
        """The continuous-batching engine of `cand` at `batch` rows of up to `context` tokens."""
        if self.engine != "specsim":
            raise InputError(f"batches are measured on this project's engine, not '{self.engine}'")
        return BatchEngine(cand.method, self.target.model, self._drafter_argument(cand), batch=batch, seed=self.seed,
                           context=context, eos_token_id=self.eos, **cand.config.to_dict())

    def measure_batches(self, cands: Sequence[Candidate], prompts: Sequence[tuple[str, str, list[int]]],
                        batches: Sequence[int], *, repeats: int, max_new_tokens: int,
                        log: Callable[[str], None] = print, prompts_at: Callable[[int], int] | None = None,
                        first_pair: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(one row per batch run: candidate, method, drafter, repeat, batch, dataset, prompts, tokens,
        decode_s, prefill_s, seconds, steps, row_steps, pair; BatchStepTrace rows of every step, with the
        candidate's label, dataset, repeat and pair). Every run decodes the first `prompts_at(batch)`
        prompts (default all) at batch B; plain decoding (ar, added when missing) runs on the same
        prompts at the same B right beside each other candidate, first or second by turns; repeats
        rotate the candidates' order. Prompts must come from one dataset (a run is one request mix)."""
        if len({ds for ds, _, _ in prompts}) != 1:
            raise InputError("a batch run decodes prompts of one dataset")
        plain = Candidate(methods.get(BASELINE).config())
        others = [c for c in cands if c.method != BASELINE]
        count = prompts_at or (lambda batch: len(prompts))
        context = max(len(ids) for _, _, ids in prompts) + max_new_tokens
        for cand in [plain, *others]:                              # warm-up, untimed
            self.batch_engine(cand, 2, context).generate([ids for _, _, ids in prompts[:2]], 4)
        runs, steps, pair = [], [], first_pair
        started = time.perf_counter()
        for r in range(repeats):
            order = others[r % len(others):] + others[: r % len(others)] if others else []
            for batch in batches:
                chosen = prompts[: count(batch)]
                for k, cand in enumerate(order or [plain]):
                    for c in ((plain, cand) if (k + r) % 2 == 0 else (cand, plain)) if others else (plain,):
                        self._batch_run(c, chosen, batch, context, r, pair, max_new_tokens, runs, steps, step_rows)
                    pair += 1
            log(f"repeat {r + 1}/{repeats} done ({time.perf_counter() - started:.0f} s)")
        return pd.DataFrame(runs), pd.DataFrame(steps)

    def _batch_run(self, cand, prompts, batch, context, repeat, pair, max_new_tokens, runs, steps, step_rows) -> None:
        """One timed batch run: its row onto `runs`, its BatchStepTrace rows onto `steps`."""
        dataset = prompts[0][0]
        out = self.batch_engine(cand, batch, context).generate([ids for _, _, ids in prompts], max_new_tokens)
        decode = sum(s.draft_s + s.verify_s + s.overhead_s for s in out.steps)
        runs.append({"candidate": cand.label, "method": cand.method, "drafter": cand.drafter or "-", "repeat": repeat,
                     "batch": batch, "dataset": dataset, "prompts": len(prompts),
                     "tokens": sum(map(len, out.tokens)), "decode_s": decode,
                     "prefill_s": sum(s.prefill_s for s in out.steps), "seconds": out.seconds,
                     "steps": len(out.steps), "row_steps": sum(len(s.rows) for s in out.steps), "pair": pair})
        run_id = f"{cand.label} B{batch}#{repeat}~{pair}"
        ids = {i: pid for i, (_, pid, _) in enumerate(prompts)}
        for row in step_rows(out.steps, run_id, cand.method, cand.config.to_dict()):
            steps.append({**row, "request_id": ids[int(row["request_id"])], "candidate": cand.label,
                          "dataset": dataset, "repeat": repeat, "pair": pair, "max_batch": batch})

    def encode(self, prompts) -> list[tuple[str, str, list[int]]]:
        """(prompt set, prompt id, token ids) of runtime.prompts Prompts."""
        return [(p.dataset, p.prompt_id, list(encode_prompt(p, self.target.tokenizer))) for p in prompts]

    def measure(self, cands: Sequence[Candidate], prompts: Sequence[tuple[str, str, list[int]]], *, repeats: int,
                max_new_tokens: int, log: Callable[[str], None] = print, paired: bool = True,
                first_pair: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(one row per generation: candidate, repeat, dataset, prompt, tokens, seconds (prefill
        included), decode_s (its steps alone), steps, pair; StepTrace rows of every step, with the
        candidate's label and dataset). `paired` (and an ar candidate among `cands`): ar runs beside
        every other generation instead of in a slot of its own. Pair ids count from `first_pair`
        (a recording that extends earlier traces keeps their ids apart)."""
        decoders = [self.decoder(c) for c in cands]              # built before any timing
        for dec in decoders:                                       # warm-up, untimed
            dec.generate(prompts[0][2], 8, self.eos)
        plain = next((i for i, c in enumerate(cands) if c.method == BASELINE), None)
        paired = paired and plain is not None and len(cands) > 1
        slots = [i for i in range(len(cands)) if not (paired and i == plain)]
        runs, steps, pairs = [], [], first_pair
        started = time.perf_counter()
        for r in range(repeats):
            for i in slots[r % len(slots):] + slots[: r % len(slots)]:
                for k, prompt in enumerate(prompts):
                    if not paired:
                        self._generate(cands[i], decoders[i], prompt, r, -1, max_new_tokens, runs, steps)
                        continue
                    order = (plain, i) if (k + r) % 2 == 0 else (i, plain)    # ar first or second by turns
                    for j in order:
                        self._generate(cands[j], decoders[j], prompt, r, pairs, max_new_tokens, runs, steps)
                    pairs += 1
            log(f"repeat {r + 1}/{repeats} done ({time.perf_counter() - started:.0f} s)")
        return pd.DataFrame(runs), pd.DataFrame(steps)

    def _generate(self, cand: Candidate, dec, prompt: tuple[str, str, list[int]], repeat: int, pair: int,
                  max_new_tokens: int, runs: list[dict], steps: list[dict]) -> None:
        """One timed generation: its row onto `runs`, its StepTrace rows onto `steps`."""
        dataset, pid, ids = prompt
        out = dec.generate(ids, max_new_tokens, self.eos)
        runs.append({"candidate": cand.label, "method": cand.method, "drafter": cand.drafter or "-",
                     "repeat": repeat, "dataset": dataset, "prompt_id": pid, "tokens": len(out.tokens),
                     "seconds": out.seconds, "steps": len(out.steps), "pair": pair,
                     "decode_s": sum(st.draft_s + st.verify_s + st.overhead_s for st in out.steps)})
        config = json.dumps(cand.config.to_dict(), sort_keys=True)
        # one run_id per generation sequence: a paired ar generation is its own (prompts repeat in it)
        run_id = f"{cand.label}~{pair}#{repeat}" if pair >= 0 and cand.method == BASELINE else f"{cand.label}#{repeat}"
        for s, accepted in output_steps(out):
            steps.append({"candidate": cand.label, "dataset": dataset, "run_id": run_id, "pair": pair,
                          "method": cand.method, "config": config, "prompt_id": pid, "step": s.step,
                          "ctx_len": s.ctx_len, "draft_forwards": s.draft_forwards, "draft_s": s.draft_s,
                          "verify_tokens": s.verify_tokens, "verify_s": s.verify_s,
                          "overhead_s": s.overhead_s, "accepted": accepted,
                          "accept_mask": list(s.accept_mask), "confidences": list(s.confidences),
                          "mode": s.mode})


def decode_seconds(runs: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """`runs` with decode_s (the sum of each generation's step times) taken from its StepTrace rows,
    for runs recorded before measure() kept it."""
    keyed = steps.assign(repeat=steps["run_id"].str.rsplit("#", n=1).str[1].astype(int),
                         decode_s=step_wall_s(steps))
    key = ["dataset", "candidate", "repeat", "prompt_id"] + (["pair"] if "pair" in runs and "pair" in steps else [])
    total = keyed.groupby(key)["decode_s"].sum()
    out = runs.drop(columns=["decode_s"], errors="ignore").merge(total.reset_index(), on=key, how="left")
    if out["decode_s"].isna().any():
        raise InputError("the step traces do not cover every measured generation: decode times cannot be derived")
    return out


def rates(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, candidate, repeat): tokens, decode seconds (the steps alone: the prompt's
    prefill is the same work for every method and no step-cost model prices it), decode tokens/s,
    end-to-end tokens/s (prefill included) and the decode speedup over plain decoding: over each
    generation's own ar partner where the runs are paired (`pair`), else over ar of the same
    dataset and repeat (its slot in the same rotation); tokens per step per row. Batch runs
    (`Bench.measure_batches`, a `batch` column) are rated per batch."""
    if "decode_s" not in runs:
        raise InputError("the measured runs hold no decode_s (step times): derive it from their StepTraces")
    if not (runs["method"] == BASELINE).any():
        raise InputError("the measured candidates hold no plain decoding (ar): speedups need it")
    batched = ["batch"] if "batch" in runs else []        # batch runs (`Bench.measure_batches`): per batch too
    keys = ["dataset", "candidate", "method", "drafter", *batched, "repeat"]
    runs = runs.assign(ar_tokens=np.nan, ar_s=np.nan)
    paired = (runs["pair"] >= 0) if "pair" in runs else pd.Series(False, index=runs.index)
    if paired.any():
        partner = runs[paired & (runs["method"] == BASELINE)].set_index(["dataset", "pair"])   # ids count per dataset
        spec = paired & (runs["method"] != BASELINE)
        mine = pd.MultiIndex.from_frame(runs.loc[spec, ["dataset", "pair"]])
        if not mine.isin(partner.index).all():
            raise InputError("a paired generation has no plain-decoding partner among the runs")
        runs.loc[spec, "ar_tokens"] = partner["tokens"].reindex(mine).to_numpy(float)
        runs.loc[spec, "ar_s"] = partner["decode_s"].reindex(mine).to_numpy(float)
    rows = "row_steps" if "row_steps" in runs else "steps"     # a batch step decodes several rows
    per = runs.groupby(keys, sort=False).agg(
        tokens=("tokens", "sum"), seconds=("decode_s", "sum"), e2e_seconds=("seconds", "sum"),
        steps=("steps", "sum"), row_steps=(rows, "sum"), ar_tokens=("ar_tokens", "sum"),
        ar_s=("ar_s", "sum")).reset_index()
    per["tokens_per_s"] = per["tokens"] / per["seconds"]
    per["e2e_tokens_per_s"] = per["tokens"] / per["e2e_seconds"]
    same = ["dataset", *batched, "repeat"]
    same_repeat = per[per["method"] == BASELINE].groupby(same)["tokens_per_s"].median()
    baseline = np.where(per["ar_s"] > 0, per["ar_tokens"] / per["ar_s"].where(per["ar_s"] > 0, 1.0),
                        same_repeat.reindex(pd.MultiIndex.from_frame(per[same])).to_numpy())
    per["speedup"] = per["tokens_per_s"] / baseline
    per["tokens_per_step"] = per["tokens"] / per["row_steps"]
    return per.drop(columns=["ar_tokens", "ar_s", "row_steps"])
