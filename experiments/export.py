"""The sweep's answer written as the engines people deploy accept it (`--export vllm,sglang,hf`).

Every specsim method is mapped once here, per engine, from its typed configuration
(`methods.parse_label`) and its Profile setup (drafter model, tree, router):

| method    | vLLM `--speculative-config`     | SGLang `--speculative-algorithm`   | transformers `generate(...)`     |
| --------- | ------------------------------- | ---------------------------------- | -------------------------------- |
| sd        | draft_model (exact)             | STANDALONE, topk 1 (exact)         | assistant_model (exact)          |
| coral     | eagle (approximate: no router, chain)  | EAGLE, topk = tree width (exact without a router) | none            |
| lookahead | ngram (approximate)             | NGRAM (approximate)                | prompt_lookup_num_tokens (approx.) |
| kangaroo  | none                            | none                               | assistant_early_exit (approx.)   |
| mcsd, cape, glide | none                    | none                               | none                             |

"exact" means the engine runs the same algorithm with the same shape, so the sweep's prediction
is about what the engine will run; "approximate" means it runs a relative of it, and `differs`
says what is dropped (the prediction is then the specsim method's, not the engine's). A method
with no counterpart is listed with the reason, never mapped to something else. Model names are
the Profile's; replace each with its checkpoint path (the notes list them).

Files (`write_exports`), per deployment (`experiments.deployments`) and engine, in the sweep's
--out: `vllm_<deployment>.json` (the `--speculative-config` JSON; with several batch sizes it
carries `num_speculative_tokens_per_batch_size`, vLLM's [start_bs, end_bs, K] schedule, K = 0
where speculating does not pay in the simulator), `sglang_<deployment>.txt` (the flags, one
line), `hf_<deployment>.json` (generate keyword arguments; assisted generation runs batch 1),
and `exports.md` / `exports.json` (what each file is, its prediction, what has no counterpart).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

import methods
from common import atomic
from common.errors import InputError
from experiments.deployments import DEPLOYMENT
from methods.spec import Setup

ENGINES = ("vllm", "sglang", "hf")


def parse_engines(text: str) -> list[str]:
    """'vllm,hf' -> ['vllm', 'hf']; InputError naming the value and the engines allowed."""
    chosen = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    for name in chosen:
        if name not in ENGINES:
            raise InputError(f"--export: unknown engine '{name}' in '{text}' (allowed: {', '.join(ENGINES)})")
    if not chosen:
        raise InputError(f"--export: no engine in '{text}' (allowed: {', '.join(ENGINES)})")
    return list(dict.fromkeys(chosen))


@dataclass(frozen=True)
class EngineConfig:
    """One specsim configuration as an engine accepts it."""

    engine: str
    settings: dict[str, Any]          # the engine's own option names and values
    match: str                        # "exact" or "approximate"
    differs: str = ""                 # what the engine does not do of the specsim method
    models: tuple[str, ...] = field(default_factory=tuple)   # Profile model names to replace by checkpoints


@dataclass(frozen=True)
class NoCounterpart:
    engine: str
    method: str
    reason: str


# ---- the mapping, one function per (engine, method) ------------------------------------------------

def _drafter_model(setup: Setup) -> str:
    spec = setup.drafter_spec
    return str(spec.get("model") or setup.drafter)


def _verified(setup: Setup, config) -> int:
    """Tokens one step verifies, from the method's own step shape (the engine's num-draft-tokens)."""
    spec = methods.get(config.method)
    return int(round(float(np.ravel(spec.step_shape(setup, spec.frame_of([config])).verify_tokens)[0])))


def _router_note(setup: Setup, config) -> str:
    routed = getattr(config, "groups", 0) or setup.drafter_spec.get("router")
    return "CORAL's LM-head router has no counterpart: the drafter's head runs in full" if routed else ""


def _vllm_sd(setup, c):
    m = _drafter_model(setup)
    return EngineConfig("vllm", {"method": "draft_model", "model": m, "num_speculative_tokens": c.gamma}, "exact",
                        models=(m,))


def _vllm_coral(setup, c):
    m = _drafter_model(setup)
    notes = [n for n in (_router_note(setup, c), "vLLM drafts a chain of num_speculative_tokens; the Profile's "
                         "drafter verifies a tree" if setup.drafter_spec.get("tree") else "") if n]
    return EngineConfig("vllm", {"method": "eagle", "model": m, "num_speculative_tokens": c.gamma},
                        "approximate" if notes else "exact", "; ".join(notes), (m,))


def _vllm_lookahead(setup, c):
    return EngineConfig("vllm", {"method": "ngram", "num_speculative_tokens": c.N - 1}, "approximate",
                        "vLLM's ngram proposes one continuation matched in the request's own context; Lookahead's "
                        f"Jacobi window (W={c.W}) and its {c.G} pooled candidates have no counterpart; the match "
                        "window is left at vLLM's default")


def _sglang_sd(setup, c):
    m = _drafter_model(setup)
    return EngineConfig("sglang", {"--speculative-algorithm": "STANDALONE", "--speculative-draft-model-path": m,
                                   "--speculative-num-steps": c.gamma, "--speculative-eagle-topk": 1,
                                   "--speculative-num-draft-tokens": _verified(setup, c)}, "exact", models=(m,))


def _sglang_coral(setup, c):
    from methods.coral import tree_width

    m = _drafter_model(setup)
    note = _router_note(setup, c)
    return EngineConfig("sglang", {"--speculative-algorithm": "EAGLE", "--speculative-draft-model-path": m,
                                   "--speculative-num-steps": c.gamma, "--speculative-eagle-topk": tree_width(setup),
                                   "--speculative-num-draft-tokens": _verified(setup, c)},
                        "approximate" if note else "exact", note, (m,))


def _sglang_lookahead(setup, c):
    return EngineConfig("sglang", {"--speculative-algorithm": "NGRAM",
                                   "--speculative-num-draft-tokens": c.G * (c.N - 1) + 1,
                                   "--speculative-ngram-max-bfs-breadth": c.G}, "approximate",
                        "SGLang's NGRAM fills its cache from generated tokens, not from a Jacobi window "
                        f"(W={c.W} has no counterpart); G candidates of N-1 tokens become its BFS breadth and draft tokens")


def _hf_sd(setup, c):
    m = _drafter_model(setup)
    return EngineConfig("hf", {"assistant_model": m, "num_assistant_tokens": c.gamma,
                               "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0},
                        "exact", models=(m,))


def _hf_kangaroo(setup, c):
    return EngineConfig("hf", {"assistant_early_exit": c.exit_layer, "num_assistant_tokens": c.gamma,
                               "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": c.eta},
                        "approximate", "transformers drafts with the target's own LM head on the exit layer's "
                        "features (no Kangaroo adapter) and adjusts the confidence threshold as it goes")


def _hf_lookahead(setup, c):
    return EngineConfig("hf", {"prompt_lookup_num_tokens": c.N - 1}, "approximate",
                        "prompt lookup proposes one continuation matched in the input; Lookahead's Jacobi window "
                        f"(W={c.W}) and {c.G} pooled candidates have no counterpart")


MAPPINGS: dict[tuple[str, str], Callable[[Setup, Any], EngineConfig]] = {
    ("vllm", "sd"): _vllm_sd, ("vllm", "coral"): _vllm_coral, ("vllm", "lookahead"): _vllm_lookahead,
    ("sglang", "sd"): _sglang_sd, ("sglang", "coral"): _sglang_coral, ("sglang", "lookahead"): _sglang_lookahead,
    ("hf", "sd"): _hf_sd, ("hf", "kangaroo"): _hf_kangaroo, ("hf", "lookahead"): _hf_lookahead,
}

_TREE = "one chain (or one top-k tree) per step; MCSD's k1 x ... x kg candidates verified level by level are not offered"
NO_COUNTERPART: dict[tuple[str, str], str] = {
    ("vllm", "mcsd"): "vLLM drafts one chain per sequence; MCSD's candidate tree has no counterpart (nearest: sd)",
    ("sglang", "mcsd"): f"SGLang drafts {_TREE} (nearest: sd)",
    ("hf", "mcsd"): "assisted generation drafts one chain (nearest: sd)",
    ("vllm", "cape"): "CAPE's confidence-dependent candidate sets are not offered",
    ("sglang", "cape"): "CAPE's confidence-dependent candidate sets are not offered",
    ("hf", "cape"): "CAPE's confidence-dependent candidate sets are not offered",
    ("vllm", "glide"): "no GLIDE drafter (cross-attention to the target's KV cache) can be loaded",
    ("sglang", "glide"): "no GLIDE drafter (cross-attention to the target's KV cache) can be loaded",
    ("hf", "glide"): "no GLIDE drafter (cross-attention to the target's KV cache) can be loaded",
    ("vllm", "kangaroo"): "no early-exit self-drafting with an adapter",
    ("sglang", "kangaroo"): "no early-exit self-drafting with an adapter",
    ("hf", "coral"): "no EAGLE feature drafter in assisted generation",
}


def to_engine(engine: str, setup: Setup, label: str) -> EngineConfig | NoCounterpart:
    """The configuration `label` on `setup` as `engine` accepts it, or why it has no counterpart."""
    config = methods.parse_label(label)
    mapping = MAPPINGS.get((engine, config.method))
    if mapping is None:
        reason = NO_COUNTERPART.get((engine, config.method), f"experiments.export maps no {engine} option to "
                                                               f"method {config.method}")
        return NoCounterpart(engine, config.method, reason)
    return mapping(setup, config)


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


def plan(served: pd.DataFrame, profiles: dict[str, Any], engines: list[str]) -> list[dict[str, Any]]:
    """Per deployment and engine: the fastest served configuration at the smallest batch that the
    engine runs exactly (else approximately), where it beats plain decoding; with several batch
    sizes, vLLM's K per batch for the same (method, drafter). The others listed as not exported."""
    entries = []
    spec = served[(served["method"] != "ar") & (served["oom"] == 0)]
    for key, group in spec.groupby(DEPLOYMENT, sort=False):
        deployment = dict(zip(DEPLOYMENT, key))
        first = group[group["batch"] == group["batch"].min()].sort_values("throughput_tok_s", ascending=False)
        for engine in engines:
            mapped = [(row, to_engine(engine, _setup(profiles, row), row["config"])) for _, row in first.iterrows()]
            runnable = [(r, m) for r, m in mapped if isinstance(m, EngineConfig) and r["throughput_ratio"] > 1.0]
            runnable.sort(key=lambda rm: (rm[1].match != "exact", -rm[0]["throughput_tok_s"]))
            entry = {"deployment": deployment, "slug": _slug(deployment), "engine": engine,
                     "batch": int(first["batch"].iat[0]), "overall_best": first["config"].iat[0],
                     "overall_ratio": float(first["throughput_ratio"].iat[0]),
                     "not_exported": sorted({(m.method, m.reason) for _, m in mapped if isinstance(m, NoCounterpart)})}
            if runnable:
                row, mapped_config = runnable[0]
                entry.update(config=row["config"], method=row["method"], drafter=row["drafter"], mapped=mapped_config,
                             throughput_tok_s=float(row["throughput_tok_s"]), ratio=float(row["throughput_ratio"]),
                             tpot_ms=float(row["tpot_ms"]))
                if engine == "vllm" and group["batch"].nunique() > 1:
                    entry["schedule"] = _k_per_batch(served, deployment, row, profiles)
            entries.append(entry)
    return entries


def _k_per_batch(served: pd.DataFrame, deployment: dict[str, Any], chosen: pd.Series,
                 profiles: dict[str, Any]) -> list[list[int]]:
    """vLLM's K at each simulated batch for the chosen (method, drafter): its served best there,
    0 where it does not beat plain decoding or did not fit in memory."""
    mask = np.logical_and.reduce([served[c] == v for c, v in deployment.items()])
    rows = served[mask & (served["method"] == chosen["method"]) & (served["drafter"] == chosen["drafter"])]
    ks = []
    for batch in sorted(served.loc[mask, "batch"].unique()):
        at = rows[rows["batch"] == batch]
        k = 0
        if len(at) and int(at["oom"].iat[0]) == 0 and float(at["throughput_ratio"].iat[0]) > 1.0:
            k = int(to_engine("vllm", _setup(profiles, at.iloc[0]), at["config"].iat[0]).settings["num_speculative_tokens"])
        ks.append((int(batch), k))
    return vllm_schedule(ks)


# ---- files --------------------------------------------------------------------------------------------

def engine_file(entry: dict[str, Any]) -> tuple[str, str]:
    """(file name, text) of one exported configuration, as the engine takes it."""
    mapped: EngineConfig = entry["mapped"]
    name = f"{entry['engine']}_{entry['slug']}"
    if entry["engine"] == "sglang":
        return name + ".txt", " ".join(f"{k} {v}" for k, v in mapped.settings.items()) + "\n"
    settings = dict(mapped.settings)
    if entry.get("schedule"):
        settings["num_speculative_tokens"] = max(k for _, _, k in entry["schedule"])
        settings["num_speculative_tokens_per_batch_size"] = entry["schedule"]
    return name + ".json", json.dumps(settings, indent=2) + "\n"


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
                        models_to_replace=list(entry["mapped"].models))
        index.append(item)
    written["exports_json"] = atomic.write_json(out_dir / "exports.json", index)
    written["exports_md"] = atomic.write_text(out_dir / "exports.md", exports_markdown(index))
    return written


def exports_markdown(index: list[dict[str, Any]]) -> str:
    lines = ["# Engine configurations", "",
             "One file per deployment and engine: `vllm_*.json` is the value of `vllm serve ... --speculative-config`, "
             "`sglang_*.txt` the flags of `python -m sglang.launch_server`, `hf_*.json` the keyword arguments of "
             "`model.generate(...)`. Model names are the Profile's: replace each with its checkpoint path. "
             "\"approximate\": the engine runs a relative of the specsim method (what differs is said); the "
             "throughput is the simulator's for the specsim method. Configurations are the answer at the smallest "
             "batch simulated (transformers' assisted generation decodes one sequence: run the sweep with batch 1 "
             "among --batch-sizes for it); vLLM's schedule covers every batch size simulated.", ""]
    for item in index:
        d = item["deployment"]
        head = f"## {item['engine']}: {d['profile']} ({d['hardware']}, {d['dataset']}, T={float(d['temperature']):g})"
        lines += [head, ""]
        if "file" in item:
            lines.append(f"- [{item['file']}]({item['file']}): `{item['config']}` ({item['match']}), served at batch "
                         f"{item['batch']}: {item['throughput_tok_s']:.0f} tokens/s, {item['ratio']:.2f}x plain "
                         f"decoding, TPOT {item['tpot_ms']:.1f} ms.")
            if item["differs"]:
                lines.append(f"- differs: {item['differs']}.")
            if item["models_to_replace"]:
                lines.append(f"- replace with checkpoint paths: {', '.join(item['models_to_replace'])}.")
            if item.get("schedule"):
                lines.append(f"- K per batch size ([start, end, K]; 0 = do not speculate): {item['schedule']}.")
        else:
            lines.append(f"- nothing exported: no configuration this engine runs beats plain decoding at batch "
                         f"{item['batch']} in the simulator.")
        if item.get("config") != item["overall_best"]:
            lines.append(f"- the deployment's fastest is `{item['overall_best']}` ({item['overall_ratio']:.2f}x).")
        lines += [f"- no counterpart: {n['method']}: {n['reason']}." for n in item["not_exported"]]
        lines.append("")
    return "\n".join(lines)
