"""`python -m training KIND`: train one drafter kind for the target on the offline corpus.

Writes `<out>/<kind>.safetensors` (or the kind's own file name) and `<out>/training.json` (final
train/eval loss, top-1 agreement with the target on held-out windows, the curve, the data's
provenance). The corpus and the target's signals are cached under `--cache`, shared by all kinds.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.rundir import claim_file
from runtime.models import load_model
from training import kinds
from training.corpus import DEFAULT_CACHE, CorpusConfig
from training.data import training_data
from training.loop import LoopConfig, train


def parse_options(items: list[str]) -> dict:
    """`name=value` pairs; values read as JSON when they parse (numbers, booleans), else as text."""
    options = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise InputError(f"--set expects name=value, got {item!r}")
        try:
            options[name.replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            options[name.replace("-", "_")] = raw
    return options


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m training", description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=sorted(kinds()), help="drafter kind to train")
    p.add_argument("--target", default="smollm2", help="target model spec (runtime.models.load_model)")
    p.add_argument("--minutes", type=float, default=30.0, help="wall-clock training budget (sets the step count)")
    p.add_argument("--steps", type=int, default=None, help="fixed step count (exact reproduction; overrides --minutes; default: none, --minutes decides)")
    p.add_argument("--planned-steps", type=int, default=None,
                   help="the learning-rate schedule's length where it exceeds --steps (reproduces a run the time budget stopped early; default: none, --steps)")
    p.add_argument("--seed", type=int, default=0, help="seed of initialisation, batch order and corpus")
    p.add_argument("--out", default=None, help="output directory (default artifacts/drafters/<kind>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the drafter weights already in --out (and their training.json) instead of refusing")
    p.add_argument("--batch-size", type=int, default=8, help="windows per step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (AdamW, cosine schedule)")
    p.add_argument("--eval-every", type=int, default=50, help="steps between held-out evaluations")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per training window")
    p.add_argument("--generated", type=int, default=CorpusConfig.n_generated, help="prompts the target answers")
    p.add_argument("--edit", type=int, default=CorpusConfig.n_edit,
                   help="standard-library functions the target hands back with an edit (copy-heavy documents)")
    p.add_argument("--max-new-tokens", type=int, default=CorpusConfig.max_new_tokens, help="tokens per answer")
    p.add_argument("--source", type=int, default=CorpusConfig.n_source, help="standard-library source windows")
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help="cache directory of corpus and target signals")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--set", dest="options", action="append", default=[], metavar="NAME=VALUE",
                   help="kind-specific option, e.g. --set num_layers=2 or --set exit_layer=2 (repeatable)")
    return p


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for option in ("seq_len", "threads"):
        if getattr(args, option) < 1:
            raise InputError(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    torch.set_num_threads(args.threads)
    options = parse_options(args.options)
    loop = LoopConfig(minutes=args.minutes, steps=args.steps, planned_steps=args.planned_steps,
                      batch_size=args.batch_size, lr=args.lr, eval_every=args.eval_every, seed=args.seed)
    corpus = CorpusConfig(n_generated=args.generated, n_edit=args.edit, max_new_tokens=args.max_new_tokens,
                          n_source=args.source, seed=args.seed)
    module = kinds()[args.kind]
    out = Path(args.out or f"artifacts/drafters/{args.kind}")
    claim_file(out / module.WEIGHTS, args.overwrite)        # before the target loads and the hours of training
    target = load_model(args.target)
    for p in target.model.parameters():
        p.requires_grad_(False)
    try:
        trainee = module.make_trainee(target, seed=args.seed, **options)
    except TypeError as exc:
        raise InputError(f"{args.kind}: bad --set option ({exc})") from None
    data = training_data(target, trainee.spec, corpus_config=corpus, seq_len=args.seq_len, cache_dir=args.cache)
    if hasattr(trainee, "prepare"):            # a trainee whose shape depends on the data (a draft vocabulary)
        trainee.prepare(data)
    print(f"data: {json.dumps(data.meta)}")
    command = ["--target", args.target, "--generated", str(args.generated), "--edit", str(args.edit),
               "--max-new-tokens", str(args.max_new_tokens),
               "--source", str(args.source), "--seq-len", str(args.seq_len), *(f"--set {o}" for o in args.options)]
    summary = train(trainee, data, loop, out, command=command)
    print(json.dumps({"kind": args.kind, "steps": summary["steps"], "seconds": summary["seconds"],
                      "untrained": summary["untrained"], "final": summary["final"], "weights": summary["weights"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
