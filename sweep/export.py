"""The sweep's answer written as the engines people deploy accept it (`--export vllm,sglang,hf`).

Every method maps itself, per engine, from its typed configuration and its Profile setup
(`MethodSpec.to_engine`, `methods.engines`): "exact" means the engine runs the same algorithm with
the same shape, so the sweep's prediction is about what the engine will run; "approximate" means
it runs a relative of it, and `differs` says what is dropped. A method with no counterpart is
listed with the reason, never mapped to something else. Model names are the Profile's; replace
each with its checkpoint path (the notes list them).

Files (`write_exports`), per deployment (`sweep.deployments`) and engine, in the sweep's
--out: `vllm_<deployment>.json` (the `--speculative-config` JSON; with several batch sizes it
carries `num_speculative_tokens_per_batch_size`, vLLM's [start_bs, end_bs, K] schedule, K = 0
where speculating does not pay in the simulator; a tree run as vLLM's chain gets, at each batch,
the chain length that does best there, `best_as_run`), `sglang_<deployment>.txt` (the flags, one
line; they hold at every batch, so they set the per-batch best whose ratios over the batches have the
highest geometric mean, `static_best`, with `--max-running-requests` at the batch where they serve
the most, `max_running`),
`hf_<deployment>.json`
(`HF_FILE`: what goes on a model's generation_config and what goes to `generate()`, applied by
`HF_SNIPPET`; assisted generation runs batch 1), and `exports.md` / `exports.json` (what each file
is, its prediction, the engine version it needs, what the engine does outside the batch sizes
that were priced, what has no counterpart).
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import methods
from common import atomic
from simulator.batch_load import BatchLoad
from sweep import ranking, scoring
from sweep.deployments import DEPLOYMENT, ServeTask, serve_task
from methods.engines import SGLANG_MAX_RUNNING, VLLM_SCHEDULE, EngineConfig, NoCounterpart
from methods.spec import Setup

PEAK_SHARE = 0.99       # a batch serving 99% of the flags' peak throughput is at their peak (a cap's choice)


def to_engine(engine: str, setup: Setup, label: str) -> EngineConfig | NoCounterpart:
    """The configuration `label` on `setup` as `engine` accepts it, or why it has no counterpart
    (the method's own `to_engine`)."""
    config = methods.parse_label(label)
    return methods.get(config.method).to_engine(engine, setup, config)


# ---- choosing what to export per deployment --------------------------------------------------------

def vllm_schedule(ks: list[tuple[int, int]]) -> list[list[int]]:
    """[(batch, K)] at the simulated batch sizes -> vLLM's [[start_bs, end_bs, K]]: each batch size
    holds until the next one; equal neighbours merge; the last range ends at the largest batch."""
    ks = sorted(ks)
    ranges: list[list[int]] = []
    for i, (b, k) in enumerate(ks):
        end = ks[i + 1][0] - 1 if i + 1 < len(ks) else b
        if ranges and ranges[-1][2] == k:
            ranges[-1][1] = end
        else:
            ranges.append([b, end, int(k)])
    return ranges


def _slug(deployment: dict[str, Any]) -> str:
    text = f"{deployment['profile']}_{deployment['dataset']}_t{float(deployment['temperature']):g}"
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _setup(profiles: dict[str, Any], row: pd.Series) -> Setup:
    drafter = row["drafter"] if isinstance(row["drafter"], str) and row["drafter"] != "-" else None
    return Setup(profiles[row["profile"]], drafter, row["acceptance"])


HF_FILE = ("`hf_*.json`: `assistant_checkpoint` (the assistant model to load, null when the target drafts for "
           "itself or there is no model), `assistant_generation_config` and `target_generation_config` (fields to "
           "set on that model's `generation_config`: transformers reads the draft length, its schedule and the "
           "confidence threshold there, not from `generate()`), `generate` (keyword arguments of "
           "`target.generate`; the assistant model object goes in as `assistant_model`) and `requires`")
HF_SNIPPET = """\
import json

export = json.load(open(path))                    # path: an hf_*.json file
# target: your target model; assistant: the model export["assistant_checkpoint"] names (None when null)
for name, value in export["assistant_generation_config"].items():
    setattr(assistant.generation_config, name, value)    # transformers reads these here, not from generate()
for name, value in export["target_generation_config"].items():
    setattr(target.generation_config, name, value)       # early exit: the target drafts for itself
kwargs = dict(export["generate"])
if export["assistant_checkpoint"] is not None:
    kwargs["assistant_model"] = assistant
output = target.generate(**inputs, **kwargs)
"""


def plan(served: pd.DataFrame, profiles: dict[str, Any], engines: list[str], loads: dict[str, BatchLoad],
         seed: int) -> list[dict[str, Any]]:
    """Per deployment and engine: the fastest served configuration at the smallest batch that the
    engine runs exactly (else approximately, what the price covers first), where it beats plain decoding; the batch sizes
    simulated and where the chosen (method, drafter) pays; with several batch sizes, vLLM's K per
    batch for it; and the file priced as the engine runs it (`price_as_run`), whose numbers are the
    ones shown; an engine whose flags hold at every batch (SGLang) gets the per-batch best that does best
    over all of them (`static_best`). The others listed as not exported."""
    entries = []
    spec = served[(served["method"] != methods.BASELINE) & (served["oom"] == 0)]
    for key, group in spec.groupby(DEPLOYMENT, sort=False):
        deployment = dict(zip(DEPLOYMENT, key))
        first = group[group["batch"] == group["batch"].min()].sort_values("throughput_tok_s", ascending=False)
        for engine in engines:
            mapped = [(row, to_engine(engine, _setup(profiles, row), row["config"])) for _, row in first.iterrows()]
            runnable = [(r, m) for r, m in mapped if isinstance(m, EngineConfig) and r["throughput_ratio"] > 1.0]
            runnable.sort(key=lambda rm: (rm[1].match != "exact", bool(rm[1].unpriced), -rm[0]["throughput_tok_s"]))
            entry = {"deployment": deployment, "slug": _slug(deployment), "engine": engine,
                     "batch": int(first["batch"].iat[0]), "overall_best": first["config"].iat[0],
                     "overall_ratio": float(first["throughput_ratio"].iat[0]),
                     "not_exported": sorted({(m.method, m.reason) for _, m in mapped if isinstance(m, NoCounterpart)})}
            if runnable:
                row, mapped_config = runnable[0]
                paying = _paying(served, deployment, row)
                if mapped_config.runs_on is not None:      # the engine runs another shape: its own best there
                    paying = [(b, None if r is None else best_as_run(engine, r, profiles, b, loads[r["profile"]]))
                              for b, r in paying]
                    opening = next((r for b, r in paying if r is not None), None)
                    if opening is not None:                # the file sets what is priced
                        mapped_config = to_engine(engine, _setup(profiles, opening), opening["config"])
                entry.update(config=row["config"], method=row["method"], drafter=row["drafter"], mapped=mapped_config,
                             throughput_tok_s=float(row["throughput_tok_s"]), ratio=float(row["throughput_ratio"]),
                             tpot_ms=float(row["tpot_ms"]), batches=[b for b, _ in paying],
                             stops_paying_at=next((b for b, r in paying if r is None), None))
                if engine == "vllm" and len(paying) > 1:
                    entry["schedule"] = vllm_schedule([(b, _vllm_k(profiles, r)) for b, r in paying])
                elif engine == "sglang" and len(paying) > 1:     # one set of flags at every batch: the best over them
                    row, entry["static_choice"] = static_best(engine, row, [b for b, _ in paying], served, deployment,
                                                              profiles, loads, seed)
                    mapped_config = to_engine(engine, _setup(profiles, row), row["config"])
                    entry.update(config=row["config"], mapped=mapped_config)
                entry["priced"] = price_as_run(_runs(entry, row, paying), engine, served, deployment, profiles,
                                               loads, seed)
                if engine == "sglang" and entry["priced"]:
                    entry["max_running"] = max_running(entry["priced"])
                    entry["plain_at_top"] = price_as_run([(max(entry["batches"]), None)], engine, served, deployment,
                                                         profiles, loads, seed)[0]     # full load without speculation
                if entry["priced"]:
                    at = entry["priced"][0]
                    entry.update(batch=at["batch"], throughput_tok_s=at["throughput_tok_s"], ratio=at["ratio"],
                                 tpot_ms=at["tpot_ms"])
            entries.append(entry)
    return entries


def best_as_run(engine: str, row: pd.Series, profiles: dict[str, Any], batch: int, load: BatchLoad) -> pd.Series:
    """`row` with the draft length that does best, at `batch`, on the setup `engine` runs its method on
    (`EngineConfig.runs_on`, e.g. vLLM's chain of a tree drafter): the method's space there, every other
    field as chosen, scored by the closed forms under the deployment's load. The tree's best depth is not
    the chain's: the engine gets the chain's. A method without a draft length keeps its configuration."""
    spec = methods.get(str(row["method"]))
    chosen = methods.parse_label(str(row["config"]))
    on = to_engine(engine, _setup(profiles, row), str(row["config"])).runs_on
    if on is None or "gamma" not in spec.config.keys():
        return row
    space = spec.space(on)
    same = [c for c in spec.configs_of(space) if dataclasses.replace(c, gamma=chosen.gamma) == chosen]
    if not same:                       # the engine's setup offers none of its other fields: kept as chosen
        return row
    entry = on.acceptance
    setting = scoring.Setting(temperature=entry.temperature, batch=int(batch), dataset=entry.dataset,
                              ctx_len=load.prompt_len + load.output_len // 2, new_tokens=load.output_len)
    scored = scoring.score(on, spec.name, spec.frame_of(same), setting)
    out = row.copy()
    out["config"] = str(ranking.ranked(scored).iloc[0]["config"])
    return out


def static_best(engine: str, chosen: pd.Series, batches: list[int], served: pd.DataFrame,
                deployment: dict[str, Any], profiles: dict[str, Any], loads: dict[str, BatchLoad],
                seed: int) -> tuple[pd.Series, list[dict[str, Any]]]:
    """For an engine that runs one configuration at every batch (SGLang's flags): of the (method,
    drafter)'s served bests at `batches` (whether or not they pay there), the one whose throughput
    ratio, priced at every one of them, has the highest geometric mean (each batch
    counts alike; the batch-1 best is not the best at batch 64). Returns it and each candidate's prices
    (`price_as_run`), best first."""
    mine = _of(served, deployment)
    mine = mine[(mine["method"] == chosen["method"]) & (mine["drafter"] == chosen["drafter"]) & (mine["oom"] == 0)]
    candidates = {str(chosen["config"]): chosen}
    for _, row in mine.sort_values("batch").iterrows():
        candidates.setdefault(str(row["config"]), row)
    scored = []
    for config, row in candidates.items():
        priced = price_as_run([(b, row) for b in batches], engine, served, deployment, profiles, loads, seed)
        mean = float(np.exp(np.mean(np.log([p["ratio"] for p in priced]))))
        scored.append({"config": config, "geomean_ratio": mean,
                       "ratios": {int(p["batch"]): float(p["ratio"]) for p in priced}})
    scored.sort(key=lambda c: c["geomean_ratio"], reverse=True)     # stable: on a tie the batch-1 choice first
    return candidates[scored[0]["config"]], scored


def max_running(priced: list[dict[str, Any]]) -> int:
    """SGLang's --max-running-requests for flags that hold at every batch: the smallest batch priced
    where they serve within `PEAK_SHARE` of their most tokens/s. Past the peak a larger batch only slows
    each request and serves fewer tokens; below it a full load queues requests the flags could serve."""
    peak = max(p["throughput_tok_s"] for p in priced)
    return int(min(p["batch"] for p in priced if p["throughput_tok_s"] >= PEAK_SHARE * peak))


def _runs(entry: dict[str, Any], chosen: pd.Series, paying: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """[(batch, served row or None)]: what the exported file runs at each batch simulated from the
    entry's on (None: plain decoding): vLLM's schedule switches with the batch (K = 0 where the
    chosen method stops paying); one set of flags or one generation_config runs as exported at every
    batch; transformers' assisted generation runs batch 1 only."""
    later = [(b, r) for b, r in paying if b >= entry["batch"]]
    if entry["engine"] == "hf":
        return [(1, chosen)] if any(b == 1 for b, _ in later) else []
    return later if entry.get("schedule") else [(b, chosen) for b, _ in later]


def price_as_run(runs: list[tuple[int, Any]], engine: str, served: pd.DataFrame, deployment: dict[str, Any],
                 profiles: dict[str, Any], loads: dict[str, BatchLoad], seed: int) -> list[dict[str, Any]]:
    """Each (batch, configuration) the file runs, on the setup the engine runs it on
    (`EngineConfig.runs_on`: e.g. a tree drafter as vLLM's chain), served under the deployment's load
    beside plain decoding (`sweep.deployments.serve_task`); where the engine runs what the sweep
    already served at that batch, that served row's numbers (the same run and seed)."""
    mine = _of(served, deployment)
    plain = mine[mine["method"] == methods.BASELINE].set_index("batch")
    out = []
    for batch, row in runs:
        ar = plain.loc[batch]
        if row is None:
            out.append({"batch": batch, "config": methods.BASELINE, "as_run": "", "throughput_tok_s":
                        float(ar["throughput_tok_s"]), "ratio": 1.0, "tpot_ms": float(ar["tpot_ms"])})
            continue
        setup = _setup(profiles, row)
        runs_on = to_engine(engine, setup, row["config"]).runs_on
        same = mine[(mine["batch"] == batch) & (mine["method"] == row["method"]) & (mine["drafter"] == row["drafter"])
                    & (mine["config"] == row["config"])]
        if runs_on is None and len(same):
            s = same.iloc[0]
        else:
            on = runs_on or setup
            config = {**methods.parse_label(row["config"]).to_dict(), "acceptance": on.acceptance_key,
                      **({"drafter": on.drafter} if on.drafter else {})}
            s = serve_task(ServeTask(on.profile, str(row["method"]), config, int(batch), loads[deployment["profile"]],
                                     seed, alone=False))
        out.append({"batch": batch, "config": row["config"], "as_run": runs_on.drafter if runs_on else "",
                    "throughput_tok_s": float(s["throughput_tok_s"]), "tpot_ms": float(s["tpot_ms"]),
                    "ratio": float(s["throughput_tok_s"]) / float(ar["throughput_tok_s"])})
    return out


def _of(served: pd.DataFrame, deployment: dict[str, Any]) -> pd.DataFrame:
    """The served rows of one deployment."""
    return served[np.logical_and.reduce([served[c] == v for c, v in deployment.items()])]


def _paying(served: pd.DataFrame, deployment: dict[str, Any], chosen: pd.Series) -> list[tuple[int, Any]]:
    """[(batch, row)] at every simulated batch of the deployment: the chosen (method, drafter)'s
    served best there, None where it does not beat plain decoding or did not fit in memory."""
    mine = _of(served, deployment)
    rows = mine[(mine["method"] == chosen["method"]) & (mine["drafter"] == chosen["drafter"])]
    out = []
    for batch in sorted(mine["batch"].unique()):
        at = rows[rows["batch"] == batch]
        pays = len(at) and int(at["oom"].iat[0]) == 0 and float(at["throughput_ratio"].iat[0]) > 1.0
        out.append((int(batch), at.iloc[0] if pays else None))
    return out


def _vllm_k(profiles: dict[str, Any], row) -> int:
    """vLLM's num_speculative_tokens of a served row, 0 for None (speculation off there)."""
    if row is None:
        return 0
    return int(to_engine("vllm", _setup(profiles, row), row["config"]).settings["num_speculative_tokens"])


# ---- files --------------------------------------------------------------------------------------------

def engine_file(entry: dict[str, Any]) -> tuple[str, str]:
    """(file name, text) of one exported configuration, as the engine takes it."""
    mapped: EngineConfig = entry["mapped"]
    name = f"{entry['engine']}_{entry['slug']}"
    if entry["engine"] == "sglang":
        flags = {**mapped.settings, "--max-running-requests": entry.get("max_running", max(entry["batches"]))}
        return name + ".txt", " ".join(f"{k} {v}" for k, v in flags.items()) + "\n"
    if entry["engine"] == "hf":
        return name + ".json", json.dumps(hf_file(entry), indent=2) + "\n"
    settings = dict(mapped.settings)
    if entry.get("schedule"):
        settings["num_speculative_tokens"] = max(k for _, _, k in entry["schedule"])
        settings["num_speculative_tokens_per_batch_size"] = entry["schedule"]
    return name + ".json", json.dumps(settings, indent=2) + "\n"


def hf_file(entry: dict[str, Any]) -> dict[str, Any]:
    """The hf_*.json object (`HF_FILE`): generation_config fields per model, generate() keyword
    arguments (the deployment's sampling included), never the assistant as a name."""
    mapped: EngineConfig = entry["mapped"]
    temperature = float(entry["deployment"]["temperature"])
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    assistant = mapped.generation_config.get("assistant")
    return {"requires": mapped.requires,
            "assistant_checkpoint": mapped.models[0] if assistant is not None else None,
            "assistant_generation_config": dict(assistant or {}),
            "target_generation_config": dict(mapped.generation_config.get("target", {})),
            "generate": {**mapped.settings, **sampling}}


def requirements(entry: dict[str, Any]) -> str:
    """The engine version / options the exported file needs."""
    needs = [entry["mapped"].requires] if entry["mapped"].requires else []
    if entry.get("schedule"):
        needs.append(VLLM_SCHEDULE)
    return "; ".join(needs)


def outside_range(entry: dict[str, Any]) -> str:
    """What the engine does at batch sizes the sweep did not price for this file."""
    batch, top = entry["batch"], max(entry["batches"])
    stops = entry.get("stops_paying_at")
    stop_note = f"; the simulation found {entry['method']} stops paying at batch {stops}" if stops else ""
    if entry["engine"] == "hf":
        return ("transformers' assisted generation decodes one sequence (batch 1)"
                + (f"; this was priced at batch {batch}: run the sweep with 1 among --batch-sizes" if batch != 1 else ""))
    if entry["engine"] == "sglang":
        return sglang_range(entry, stop_note)
    k = int(entry["mapped"].settings["num_speculative_tokens"])
    if not entry.get("schedule"):
        return (f"priced at batch {batch} only; vLLM runs num_speculative_tokens={k} at every batch (simulate several "
                "--batch-sizes for a K per batch)")
    last = entry["schedule"][-1][2]
    if last == 0:
        return f"vLLM carries the last range's K=0 past batch {top}: no speculation there, as simulated at {top}"
    return (f"vLLM carries the last range's K={last} to every batch past {top} up to its --max-num-seqs, a K nobody "
            f"priced there: serve with --max-num-seqs {top} to stay inside the simulated range")


def sglang_range(entry: dict[str, Any], stop_note: str) -> str:
    """What SGLang does with the exported flags at every batch: where --max-running-requests was set and
    why, and plain decoding's full-load throughput where it beats the flags' peak."""
    batch, top = entry["batch"], max(entry["batches"])
    cap = entry.get("max_running", top)
    text = f"SGLang runs these flags at every batch up to --max-running-requests ({SGLANG_MAX_RUNNING}); "
    if not entry.get("priced"):
        return text + f"priced at batch {batch}, set here to {top}, the largest batch simulated{stop_note}"
    peak = next(p for p in entry["priced"] if p["batch"] == cap)
    text += (f"set here to {cap}, the smallest batch simulated where they serve within {1 - PEAK_SHARE:.0%} of their most "
             f"({peak['throughput_tok_s']:.0f} tokens/s; a larger batch would slow each request for no more){stop_note}")
    plain = entry["plain_at_top"]
    if plain["throughput_tok_s"] > peak["throughput_tok_s"]:
        text += (f"; at full load plain decoding at batch {top} serves {plain['throughput_tok_s']:.0f} tokens/s, more "
                 "than these flags at any batch: where full load matters more than latency at low load, serve plain "
                 "decoding")
    return text


def write_exports(entries: list[dict[str, Any]], out_dir: Path) -> dict[str, Path]:
    """The engine files, exports.json (the index) and exports.md (what each is, what has no counterpart)."""
    out_dir = Path(out_dir)
    written: dict[str, Path] = {}
    index = []
    for entry in entries:
        item = {k: v for k, v in entry.items() if k not in ("mapped", "not_exported")}
        item["not_exported"] = [{"method": m, "reason": r} for m, r in entry["not_exported"]]
        if "mapped" in entry:
            name, text = engine_file(entry)
            written[f"export:{name}"] = atomic.write_text(out_dir / name, text)
            item.update(file=name, match=entry["mapped"].match, differs=entry["mapped"].differs,
                        unpriced=entry["mapped"].unpriced,
                        models_to_replace=list(entry["mapped"].models), requires=requirements(entry),
                        outside_range=outside_range(entry))
        index.append(item)
    written["exports_json"] = atomic.write_json(out_dir / "exports.json", index)
    written["exports_md"] = atomic.write_text(out_dir / "exports.md", exports_markdown(index))
    return written


def _priced(p: dict[str, Any]) -> str:
    on = f" on {p['as_run']}" if p["as_run"] else ""
    return f"batch {p['batch']} `{p['config']}`{on} {p['ratio']:.2f}x"


def exports_markdown(index: list[dict[str, Any]]) -> str:
    lines = ["# Engine configurations", "",
             "One file per deployment and engine: `vllm_*.json` is the value of `vllm serve ... --speculative-config`, "
             "`sglang_*.txt` the flags of `python -m sglang.launch_server`, `hf_*.json` what transformers' assisted "
             "generation takes (below). Model names are the Profile's: replace each with its checkpoint path. "
             "\"approximate\": the engine runs a relative of the specsim method (what differs is said). Every number "
             "is the exported file priced as the engine runs it (the simulator serving, under the deployment's load, "
             "the configuration the file sets at each batch, on the drafter the engine drafts with: a tree drafter "
             "exported to vLLM drafts a chain). Configurations are the answer at the smallest "
             "batch simulated, except where one set of flags runs at every batch (SGLang): there, of the per-batch "
             "bests, the one whose ratios over the batches simulated have the highest geometric mean; \"needs\" is "
             "the engine version or option the file relies on, \"outside the priced range\" what the engine does at "
             "batch sizes the sweep did not price.", ""]
    for item in index:
        d = item["deployment"]
        head = f"## {item['engine']}: {d['profile']} ({d['hardware']}, {d['dataset']}, T={float(d['temperature']):g})"
        lines += [head, ""]
        if "file" in item:
            first = (item.get("priced") or [{}])[0]
            runs = (f"`{first['config']}` on {first['as_run']} ({item['match']}; the sweep chose `{item['config']}` on "
                    f"{item['drafter']}, which this engine runs as {first['as_run']})" if first.get("as_run")
                    else f"`{item['config']}` ({item['match']})")
            lines.append(f"- [{item['file']}]({item['file']}): {runs}, priced as the "
                         f"engine runs it at batch {item['batch']}: {item['throughput_tok_s']:.0f} tokens/s, "
                         f"{item['ratio']:.2f}x plain decoding, TPOT {item['tpot_ms']:.1f} ms.")
            if len(item.get("priced", ())) > 1 or any(p["as_run"] for p in item.get("priced", ())):
                lines.append("- as the engine runs it, per batch simulated: " + "; ".join(_priced(p) for p in item["priced"])
                             + ".")
            if item["differs"]:
                lines.append(f"- differs: {item['differs']}.")
            if item.get("unpriced"):
                lines.append(f"- not in the price (an upper bound): {item['unpriced']}.")
            if item["requires"]:
                lines.append(f"- needs: {item['requires']}.")
            lines.append(f"- outside the priced range: {item['outside_range']}.")
            if item["models_to_replace"]:
                lines.append(f"- replace with checkpoint paths: {', '.join(item['models_to_replace'])}.")
            if item.get("static_choice"):
                lines.append("- one configuration at every batch, chosen by its geometric-mean ratio over the batches "
                             "simulated: " + "; ".join(f"`{c['config']}` {c['geomean_ratio']:.2f}x ("
                                                       + ", ".join(f"{r:.2f}" for r in c["ratios"].values()) + ")"
                                                       for c in item["static_choice"]) + ".")
            if item.get("schedule"):
                lines.append(f"- K per batch size ([start, end, K]; 0 = do not speculate): {item['schedule']}.")
        else:
            lines.append(f"- nothing exported: no configuration this engine runs beats plain decoding at batch "
                         f"{item['batch']} in the simulator.")
        if item.get("config") != item["overall_best"]:
            lines.append(f"- the deployment's fastest is `{item['overall_best']}` ({item['overall_ratio']:.2f}x).")
        lines += [f"- no counterpart: {n['method']}: {n['reason']}." for n in item["not_exported"]]
        lines.append("")
    if any(item["engine"] == "hf" and "file" in item for item in index):
        lines += ["## Applying an hf_*.json", "", HF_FILE + ". With `target`, `assistant` and tokenized `inputs` loaded:",
                  "", "```python", HF_SNIPPET.rstrip("\n"), "```", ""]
    return "\n".join(lines)
