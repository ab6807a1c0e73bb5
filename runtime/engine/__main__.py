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

import methods
from common import atomic
from runtime.engine import Sampling, make_decoder
from common.errors import InputError, cli_entry
from runtime.models import LoadedModel, check_same_vocabulary, load_model, truncated


def own_drafter_methods() -> list[str]:
    """Methods whose drafter argument is their own drafter module or file (None: an untrained one)."""
    return [s.name for s in methods.specs() if s.decoder_class().own_drafter]


def decoder_arguments(method: str, text: str = "") -> tuple[dict, str | None]:
    """(`make_decoder`'s keyword arguments, own drafter file or None) for `method` from a JSON object
    (config keys, decoder options and, for methods with their own drafter, "drafter": a trained file)
    or the method's label ('mcsd k4x2x1 repl'); empty text: the config's defaults. Checked before
    any model is loaded."""
    spec = methods.get(method)
    text = text.strip()
    if text.split(" ", 1)[0] == method:
        config = spec.config.from_label(text).to_dict()
    else:
        try:
            config = json.loads(text) if text else {}
        except json.JSONDecodeError:
            raise InputError(f"configuration of '{method}' is not JSON nor a '{method} ...' label: {text!r}") from None
        if not isinstance(config, dict):
            raise InputError(f"configuration of '{method}' must be a JSON object or a label, got {text!r}")
    own = config.pop("drafter", None) if method in own_drafter_methods() else None
    if own is not None and not Path(own).is_file():
        raise InputError(f"{method}: drafter file not found: {own}")
    spec.decoder_class().split_config(config)
    return config, own


def parse_method(text: str) -> tuple[str, dict, str | None]:
    """'mcsd', 'mcsd:{"k": "4x2x1"}' or a label 'mcsd k4x2x1 repl' -> (method, *decoder_arguments)."""
    name, sep, raw = text.strip().partition(":")
    if not sep:
        name, raw = (text.split() or [""])[0], text
    return (name.strip(), *decoder_arguments(name.strip(), raw))


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
    p.add_argument("--methods", nargs="+", default=None,
                   help='methods as name, name:{json config} or a label ("mcsd k4x2x1 repl"); methods with '
                        f'their own drafter ({", ".join(own_drafter_methods())}) take {{"drafter": FILE}} (a trained '
                        'drafter; default an untrained one, which keeps greedy identity). Default: every '
                        'registered method with its default configuration')
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
    runs = [parse_method(m) for m in (args.methods or methods.names())]
    target = load_model(args.target)
    drafter = load_drafter(args.drafter, target)
    prompts = prompt_ids(args.prompts, target)
    eos = getattr(target.tokenizer, "eos_token_id", None)
    sampling = Sampling(args.temperature, args.top_p)
    reference = {} if not sampling.greedy else {
        pid: make_decoder("ar", target.model).generate(ids, args.max_new_tokens, eos).tokens for pid, ids in prompts}
    rows, failures = [], 0
    for name, config, own in runs:
        decoder = make_decoder(name, target.model, own if name in own_drafter_methods() else drafter.model,
                               sampling=sampling, seed=args.seed, **config)
        decoder.generate(prompts[0][1], 8, eos)  # warm-up
        for pid, ids in prompts:
            out = decoder.generate(ids, args.max_new_tokens, eos)
            same = out.tokens == reference[pid] if sampling.greedy else None
            failures += same is False
            rows.append(dict(method=name, config=decoder.config.label, prompt_id=pid, tokens=len(out.tokens),
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
