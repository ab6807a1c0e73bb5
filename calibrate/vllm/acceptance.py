"""The vLLM Profile's acceptance entries, one per (drafter, dataset), so that the closed forms and the
sweep price it too (the closed loop replays the spans themselves, `traces.stream_steps`).

- EAGLE-3 (drafter `eagle3`, method coral): beta_i at every draft length the spans tell (1-19), as
  `calibrate.ingest specdecode-bench` measured them over the walk's decode steps
  (data/specdecode_bench/llama-3.1-8b.json), alpha its beta_1 at k = 1;
- n-gram (drafter `prompt_lookup`): prompt_lookup's copy-or-free chain (`methods.match_chain`) fitted
  on the replayed steps of window 3-7 at k = 1, 3 and 5 (`methods.prompt_lookup.PromptLookup.fit_steps`)
  of `FIT_REQUESTS` requests evenly spaced through the file (the likelihood fit takes minutes on every
  request of ShareGPT), with every sweep draft length's replay at that window over every request
  beside it (tokens per step and the share of steps that propose), which the closed form takes where
  it holds the configuration; the chain's hit and copy entry then matched to that replay
  (`matched`), since other targets carry the chain alone.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from calibrate.vllm.facts import NGRAM, NGRAM_WINDOW
from calibrate.vllm.streams import Stream
from common.errors import InputError
from methods.match_chain import at_bound, chain_at, matched_to_replay
from traces.stream_steps import stream_steps

FIT_K = (1, 3, 5)
FIT_REQUESTS = 40
REPLAYED_K = tuple(range(1, 11))          # the sweep's draft lengths (methods.prompt_lookup.GAMMAS)
TEMPERATURE = 0.0                         # the n-gram spans replay exactly under greedy verification


def ngram_label(k: int) -> str:
    n_min, n_max = NGRAM_WINDOW
    return NGRAM.parse(f"{NGRAM.name} g{k} nmin{n_min} nmax{n_max}").label


def eagle_entry(dataset: str, summary: dict) -> dict:
    """EAGLE-3's entry of `dataset` from the ingest's statistics (`summary`: its dataset section)."""
    by_k = summary["drafters"]["eagle"]["by_k"]
    at_gamma = {str(k): [b for b in beta if b is not None] for k, beta in zip(by_k["k"], by_k["beta"])}
    at_gamma = {k: v for k, v in at_gamma.items() if v}
    if not at_gamma:
        raise InputError(f"the ingest's statistics of {dataset} hold no EAGLE beta")
    longest = at_gamma[str(max(int(k) for k in at_gamma))]
    return {"drafter": "eagle3", "temperature": TEMPERATURE, "dataset": dataset, "alpha": at_gamma["1"][0],
            "alpha_by_position": longest, "alpha_by_position_at_gamma": at_gamma,
            "source": "SpecDecode-Bench spans (calibrate.ingest specdecode-bench): beta_i over the walk's decode steps "
                      "at each draft length"}


def replayed_frame(stream: Stream, ks=FIT_K, requests: int = FIT_REQUESTS) -> pd.DataFrame:
    """StepTrace rows (the columns prompt_lookup's fit reads) of the n-gram proposer's replayed decode
    steps at each k, of `requests` requests evenly spaced through the stream."""
    chosen = np.unique(np.linspace(0, len(stream.requests) - 1, min(requests, len(stream.requests))).astype(int))
    frames = []
    for k in ks:
        steps = stream_steps([stream.requests[i] for i in chosen], "ngram", k,
                             proposed=[stream.proposed[i] for i in chosen])
        request = np.repeat(np.arange(steps.requests), steps.steps_of)
        index = np.arange(steps.size.size) - steps.offsets[request]
        decode = index > 0
        frames.append(pd.DataFrame({"run_id": f"{ngram_label(k)}#replay", "method": NGRAM.name,
                                    "config": ngram_label(k), "prompt_id": request[decode], "step": index[decode] - 1,
                                    "ctx_len": 0, "draft_forwards": 0, "verify_tokens": 1 + steps.drafted[decode],
                                    "accepted": steps.size[decode]}))
    return pd.concat(frames, ignore_index=True)


def ngram_entry(stream: Stream) -> dict:
    """The n-gram proposer's entry of one dataset (module docstring)."""
    entry = NGRAM.fit_steps(replayed_frame(stream), dataset=stream.dataset, temperature=TEMPERATURE,
                           source=f"SpecDecode-Bench {stream.file}, vLLM's n-gram proposer replayed (window "
                                  f"{NGRAM_WINDOW[0]}-{NGRAM_WINDOW[1]}; the chain on {FIT_REQUESTS} requests)")
    replayed = {}
    for k in REPLAYED_K:
        steps = stream_steps(stream.requests, "ngram", k, proposed=stream.proposed)
        decode = np.ones(steps.size.size, bool)
        decode[steps.offsets[:-1]] = False
        replayed[ngram_label(k)] = [round(float(steps.size[decode].mean()), 5),
                                    round(float((steps.drafted[decode] > 0).mean()), 5)]
    entry[NGRAM.name]["replayed"] = replayed
    entry[NGRAM.name]["replayed_new_tokens"] = int(round(float(np.mean([r.output_len for r in stream.requests]))))
    entry["drafter"] = NGRAM.name
    return matched(entry)


def matched(entry: dict) -> dict:
    """The n-gram entry with its chain matched to the replay over every request
    (`methods.match_chain.matched_to_replay`): the likelihood fit sees `FIT_REQUESTS` of them, and
    the chain is what other targets carry (ASSUMED) without the replay. The fit's own chain and each
    one's worst error on the replay are kept in `fit.matched_to_replay`."""
    fitted = NGRAM.acceptance_part(entry[NGRAM.name], "n-gram entry")
    configs = [NGRAM.parse(label) for label in fitted.replayed]
    part = matched_to_replay(fitted, configs)

    def worst(p) -> float:
        tokens, _ = chain_at(p, [c.n_min for c in configs], [c.n_max for c in configs], [c.gamma for c in configs],
                             p.replayed_new_tokens)
        return round(float(np.max(np.abs(tokens / np.array([fitted.replayed[c.label][0] for c in configs]) - 1.0))), 4)

    entry[NGRAM.name].update({k: round(v, 6) for k, v in part.parameters().items()})
    entry["fit"]["matched_to_replay"] = {"fitted": fitted.parameters(), "worst_tokens_error_fitted": worst(fitted),
                                         "worst_tokens_error": worst(part), "at_bound": at_bound(part)}
    return entry
