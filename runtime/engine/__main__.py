"""`python -m runtime.engine`: run methods on real prompts, check greedy identity, report tokens/s.

At temperature 0 (the default) every method's output is compared token for token with plain
greedy `ar`; with `--temperature` > 0 the methods sample (seeded by `--seed`) and there is no
identity to check (`identical` is left empty). tokens/s is generated tokens over the wall time
of `generate` (prefill included), per method summed over the prompts, after one untimed warm-up
generation per method.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
import torch

from common import atomic
from runtime.engine import Sampling, make_decoder
from common.errors import InputError, cli_entry
from runtime.models import LoadedModel, check_same_vocabulary, load_model, truncated

DEFAULT_METHODS = ['ar', 'sd:{"gamma": 4}', 'mcsd:{"k": "4x2x1"}', 'cape:{"gamma": 4}',
                   'lookahead:{"W": 5, "N": 3, "G": 5}', 'glide:{"gamma": 4}', 'kangaroo:{"gamma": 4}',
                   'coral:{"gamma": 4}']
SELF_DRAFTING = ("glide", "kangaroo", "coral")  # own drafter: config "drafter" (a trained file) or untrained


def parse_method(text: str) -> tuple[str, dict]:
    name, _, raw = text.partition(":")
    try:
        config = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        raise InputError(f"method configuration of '{name}' is not JSON: {raw!r}") from None
    if not isinstance(config, dict):
        raise InputError(f"method configuration of '{name}' must be a JSON object")
    return name, config


def load_drafter(spec: str, target: LoadedModel) -> LoadedModel:
    """`layers:<n>`: the target's first n layers; a `.safetensors` file: a trained vanilla drafter
    (`python -m training vanilla`) on the target's embeddings and head; anything else: `load_model(spec)`."""
    if spec.startswith("layers:"):
        return LoadedModel(truncated(target.model, int(spec.split(":", 1)[1])), target.tokenizer, spec)
    if spec.endswith(".safetensors"):
        from training.vanilla import load_vanilla

        return LoadedModel(load_vanilla(spec, target.model), target.tokenizer, spec)
    drafter = load_model(spec)
    check_same_vocabulary(target, drafter)
    return drafter


def prompt_ids(spec: str, target: LoadedModel) -> list[tuple[str, list[int]]]:
    """`mtbench:2,humaneval:2` -> encoded prompts (the first n of each set)."""
    from traces.prompts import encode_prompt, load_prompts

    out = []
    for part in spec.split(","):
        name, _, n = part.partition(":")
        for prompt in load_prompts(name, limit=int(n) if n else None):
            out.append((prompt.prompt_id, list(encode_prompt(prompt, target.tokenizer))))
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m runtime.engine", description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2", help="target model spec (see runtime.models.load_model)")
    p.add_argument("--drafter", default="layers:2", help="drafter spec, or layers:<n> = the target's first n layers")
    p.add_argument("--prompts", default="mtbench:2,humaneval:2", help="prompt sets, name:count joined by commas")
    p.add_argument("--methods", nargs="+", default=DEFAULT_METHODS,
                   help='methods as name or name:{json config}; glide/kangaroo/coral take {"drafter": FILE} '
                        '(a trained drafter; default an untrained one, which keeps greedy identity)')
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature; 0 = greedy with the identity check against ar")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass kept when sampling (1 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the decoders' random source when sampling")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--out", default=None, help="optional CSV with one row per method and prompt")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    methods = [parse_method(m) for m in args.methods]
    target = load_model(args.target)
    drafter = load_drafter(args.drafter, target)
    prompts = prompt_ids(args.prompts, target)
    eos = getattr(target.tokenizer, "eos_token_id", None)
    sampling = Sampling(args.temperature, args.top_p)
    reference = {} if not sampling.greedy else {
        pid: make_decoder("ar", target.model).generate(ids, args.max_new_tokens, eos).tokens for pid, ids in prompts}
    rows, failures = [], 0
    for name, config in methods:
        own = config.pop("drafter", None) if name in SELF_DRAFTING else None
        if own is not None and not Path(own).is_file():
            raise InputError(f"{name}: drafter file not found: {own}")
        decoder = make_decoder(name, target.model, own if name in SELF_DRAFTING else drafter.model,
                               sampling=sampling, seed=args.seed, **config)
        decoder.generate(prompts[0][1], 8, eos)  # warm-up
        for pid, ids in prompts:
            out = decoder.generate(ids, args.max_new_tokens, eos)
            same = out.tokens == reference[pid] if sampling.greedy else None
            failures += same is False
            rows.append(dict(method=name, config=json.dumps(config), prompt_id=pid, tokens=len(out.tokens),
                             seconds=out.seconds, steps=len(out.steps), identical=same,
                             draft_s=sum(s.draft_s for s in out.steps), verify_s=sum(s.verify_s for s in out.steps),
                             overhead_s=sum(s.overhead_s for s in out.steps)))
    frame = pd.DataFrame(rows)
    summary = frame.groupby(["method", "config"], sort=False).agg(
        tokens=("tokens", "sum"), seconds=("seconds", "sum"), steps=("steps", "sum"), identical=("identical", lambda x: None if x.isna().any() else bool(x.all())),
        draft_s=("draft_s", "sum"), verify_s=("verify_s", "sum"), overhead_s=("overhead_s", "sum")).reset_index()
    summary["tokens_per_s"] = summary["tokens"] / summary["seconds"]
    summary["tokens_per_step"] = summary["tokens"] / summary["steps"]
    print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if args.out:
        atomic.write_csv(args.out, frame)
    if failures:
        print(f"{failures} generation(s) differ from greedy ar", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
