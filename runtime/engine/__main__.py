"""`python -m runtime.engine`: run methods on real prompts, check greedy identity, report tokens/s.

At temperature 0 (the default) every method's output is compared token for token with plain
greedy `ar`; with `--temperature` > 0 the methods sample (seeded by `--seed`) and there is no
identity to check (`identical` is left empty). tokens/s is generated tokens over the wall time
of `generate` (prefill included), per method summed over the prompts, after one untimed warm-up
generation per method.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from methods import BASELINE
import methods
from common import atomic
from runtime.engine import Sampling, make_decoder
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.progress import add_progress_option, progress_bar, progress_enabled
from common.rundir import claim_file
from runtime.models import LoadedModel, check_same_vocabulary, load_model, truncated
from runtime.drafters.vanilla import load_vanilla
from runtime.prompts import ByteTokenizer, encode_prompt, BUILTIN_SETS, load_prompt_mix


def own_drafter_methods() -> list[str]:
    """Methods whose drafter argument is their own drafter module or file (None: an untrained one)."""
    return [s.name for s in methods.specs() if s.decoder_class().own_drafter]


def decoder_arguments(method: str, text: str = "") -> tuple[dict, str | None]:
    """(`make_decoder`'s keyword arguments, own drafter file or None) for `method` from a JSON object
    (config keys, decoder options and, for methods with their own drafter, "drafter": a trained file)
    or the method's label ('mcsd k4x2x1 repl'); empty text: the config's defaults. Checked before
    any model is loaded."""
    spec = methods.get(method)
    decoder = spec.decoder_class()
    own_key = ("drafter",) if decoder.own_drafter else ()
    config, extra = spec.config.split(text.strip() or None, (*decoder.options, *own_key), "decoder option")
    own = extra.pop("drafter", None)
    if own is not None and not Path(own).is_file():
        raise InputError(f"{method}: drafter file not found: {own}")
    decoder.split_config(extra, spec)
    return {**config.to_dict(), **extra}, own


def parse_method(text: str) -> tuple[str, dict, str | None]:
    """'mcsd', 'mcsd:{"k": "4x2x1"}' or a label 'mcsd k4x2x1 repl' -> (method, *decoder_arguments)."""
    name, sep, raw = text.strip().partition(":")
    if not sep:
        name, raw = (text.split() or [""])[0], text
    return (name.strip(), *decoder_arguments(name.strip(), raw))


def check_drafter_spec(spec: str) -> None:
    """`layers:<n>` needs a positive integer n (checked before any model loads)."""
    if spec.startswith("layers:"):
        n = spec.split(":", 1)[1]
        if not n.isdigit() or int(n) < 1:
            raise InputError(f"--drafter {spec}: layers:<n> needs a positive integer n (e.g. layers:2)")


def load_drafter(spec: str, target: LoadedModel) -> LoadedModel:
    """`layers:<n>`: the target's first n layers; a `.safetensors` file: a trained vanilla drafter
    (`python -m training vanilla`) on the target's embeddings and head; anything else: `load_model(spec)`."""
    check_drafter_spec(spec)
    if spec.startswith("layers:"):
        return LoadedModel(truncated(target.model, int(spec.split(":", 1)[1])), target.tokenizer, spec)
    if spec.endswith(".safetensors"):
        return LoadedModel(load_vanilla(spec, target.model), target.tokenizer, spec)
    drafter = load_model(spec)
    check_same_vocabulary(target, drafter)
    return drafter


def prompt_ids(prompts: list, target: LoadedModel) -> list[tuple[str, list[int]]]:
    """Encoded prompts; a model built in code without a tokenizer (tiny, random:) gets the byte tokenizer."""
    tokenizer = target.tokenizer or ByteTokenizer(target.vocab_size)
    return [(prompt.prompt_id, list(encode_prompt(prompt, tokenizer))) for prompt in prompts]


def check_options(args: argparse.Namespace) -> None:
    """Every numeric option, before any model loads (one line naming the option and what is allowed)."""
    import math

    if args.threads < 1:
        raise InputError(f"--threads is {args.threads}, must be >= 1")
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens is {args.max_new_tokens}, must be >= 1")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise InputError(f"--temperature is {args.temperature}, must be a finite number >= 0 (0 = greedy)")
    if not 0 < args.top_p <= 1:
        raise InputError(f"--top-p is {args.top_p}, must lie in (0, 1]")
    check_drafter_spec(args.drafter)


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m runtime.engine", description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2",
                   help="target model: smollm2 (default), tiny[:seed] (built in code, byte tokenizer), "
                        "random:<architecture>, an HF id, a directory or a .gguf file")
    p.add_argument("--drafter", default="layers:2",
                   help="drafter spec, or layers:<n> = the target's first n layers (default layers:2)")
    p.add_argument("--prompts", default="mtbench:2,humaneval:2",
                   help=f"prompt sets ({', '.join(BUILTIN_SETS)} or a JSONL path) as name:count joined by commas "
                        "(default mtbench:2,humaneval:2)")
    p.add_argument("--methods", nargs="+", default=None,
                   help='methods as name, name:{json config} or a label ("mcsd k4x2x1 repl"); methods with '
                        f'their own drafter ({", ".join(own_drafter_methods())}) take {{"drafter": FILE}} (a trained '
                        'drafter; default an untrained one, which keeps greedy identity). Default: every '
                        'registered method with its default configuration')
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate per prompt (default 64)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature >= 0; 0 (default) = greedy with the identity check against ar")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass kept when sampling, in (0, 1] (default 1 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of the decoders' random source when sampling (default 0)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.add_argument("--out", default=None, help="optional CSV with one row per method and prompt (default: none, the table is printed)")
    add_progress_option(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file instead of refusing")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_options(args)
    if args.out:
        claim_file(args.out, args.overwrite)
    torch.set_num_threads(args.threads)
    runs = [parse_method(m) for m in (args.methods or methods.names())]
    prompt_set = load_prompt_mix(args.prompts)
    target = load_model(args.target)
    drafter = load_drafter(args.drafter, target)
    prompts = prompt_ids(prompt_set, target)
    eos = getattr(target.tokenizer, "eos_token_id", None)
    sampling = Sampling(args.temperature, args.top_p)
    reference = {} if not sampling.greedy else {
        pid: make_decoder(BASELINE, target.model).generate(ids, args.max_new_tokens, eos).tokens for pid, ids in prompts}
    rows, failures = [], 0
    bar = progress_bar(len(runs) * len(prompts), "generating", progress_enabled(args.progress), unit="generation")
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
            bar.update()
    bar.close()
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
