"""`python -m traces.batch_bench`: what the batch does to plain decoding and to speculation, measured.

Deployed engines decode batches, and speculation pays less as the batch grows: each row's drafts
widen a verify forward that already carries B rows. This bench measures it on this machine with the
continuous-batching engine (`runtime.engine.batch`): SmolLM2-135M (`--target`, loaded offline)
decodes B requests at once, B = 1, 2, 4, 8, 16, 32 (`--batches`), with each method (`--method`,
repeatable; default plain decoding and prompt lookup). `sd` needs a draft model (`--drafter`: a
trained vanilla drafter file or `layers:K`, the target's first K layers); no trained drafter weights
are bundled (only their training.json), so by default it is left out. The requests are real prompts,
MT-Bench and HumanEval taken in turn (`--prompts`), the first B of them at batch B, each decoding
`--max-new-tokens`. One CPU thread by default (`--threads`): on a shared 2-core machine two threads
wait on each other behind other work (a batch-8 forward of SmolLM2 measured 3.5 s on two threads
against 0.15 s on one while another process ran).

Printed per (method, batch): decode tokens/s (tokens generated over the steps' own seconds, the
requests' prefills left out), tokens per row and step, and the speedup over plain decoding at the same
batch; then the verify forward's median seconds per (batch, width), width being the query tokens per
row (the step's widest tree), and its cost over plain decoding's one-token verify at that batch. The
runs of one batch size take their turns across methods, so a drift of a shared machine's speed
touches every method alike; one untimed warm-up run per method comes first. `--out F.csv` writes both
tables (column `table`).
"""
from __future__ import annotations

import itertools
from typing import Sequence

import pandas as pd
import torch

from common import atomic
from common.cli import CliParser, cli_entry
from common.errors import InputError
import methods
from methods import BASELINE
from runtime.engine.__main__ import load_drafter, parse_method
from runtime.engine.batch import BatchEngine, BatchStepRecord, batched_methods
from runtime.models import load_model
from runtime.prompts import ByteTokenizer, Prompt, encode_prompt, load_prompt_mix
from traces.timing import int_list

DEFAULT_METHODS = (BASELINE, "prompt_lookup g4 nmin2 nmax3")
DEFAULT_PROMPTS = "mtbench:1-16,humaneval:1-16"
DEFAULT_BATCHES = "1,2,4,8,16,32"


def needs_draft_model(method: str) -> bool:
    return methods.get(method).decoder_class().needs_drafter


def in_turn(prompts: Sequence[Prompt]) -> list[Prompt]:
    """The prompts of each dataset taken in turn, so that any first B of them mix the datasets."""
    by_set: dict[str, list[Prompt]] = {}
    for p in prompts:
        by_set.setdefault(p.dataset, []).append(p)
    return [p for group in itertools.zip_longest(*by_set.values()) for p in group if p is not None]


def decode(engine: BatchEngine, prompts: Sequence[list[int]], new: int) -> list[BatchStepRecord]:
    for i, ids in enumerate(prompts):
        engine.add(i, ids, new)
    steps = []
    while not engine.idle:
        steps.append(engine.step())
    return steps


def step_table(label: str, batch: int, steps: Sequence[BatchStepRecord]) -> pd.DataFrame:
    """One row per step: its rows, width, tokens and seconds."""
    return pd.DataFrame([{"method": label, "batch": batch, "rows": len(s.rows), "width": s.width,
                          "tokens": sum(r.accepted for r in s.rows), "verify_s": s.verify_s,
                          "decode_s": s.draft_s + s.verify_s + s.overhead_s, "prefill_s": s.prefill_s}
                         for s in steps])


def summary(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (method, batch): tokens/s of the decode steps, tokens per row and step, speedup over plain."""
    runs = steps.groupby(["method", "batch"], sort=False).agg(
        steps=("tokens", "size"), row_steps=("rows", "sum"), tokens=("tokens", "sum"),
        decode_s=("decode_s", "sum"), prefill_s=("prefill_s", "sum")).reset_index()
    runs["tokens_per_s"] = runs.tokens / runs.decode_s
    runs["tokens_per_row_step"] = runs.tokens / runs.row_steps
    plain = runs[runs.method == BASELINE].set_index("batch").tokens_per_s
    runs["speedup"] = runs.tokens_per_s / runs.batch.map(plain)
    return runs


def verify_costs(steps: pd.DataFrame) -> pd.DataFrame:
    """Per (batch, width): the verify forward's median seconds, and over plain decoding's at the batch."""
    costs = steps.groupby(["batch", "width"]).agg(steps=("verify_s", "size"), verify_s=("verify_s", "median"))
    costs = costs.reset_index()
    plain = steps[steps.method == BASELINE].groupby("batch").verify_s.median()
    costs["over_plain"] = costs.verify_s / costs.batch.map(plain)
    return costs


def build_parser() -> CliParser:
    p = CliParser(prog="python -m traces.batch_bench", description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2", help="target model spec (default %(default)s)")
    p.add_argument("--drafter", default=None,
                   help="draft model for sd/mcsd/cape: a trained vanilla drafter file or layers:K (default: none)")
    p.add_argument("--method", action="append", default=None,
                   help=f"a method label or name:JSON, repeatable (default: {' and '.join(map(repr, DEFAULT_METHODS))}; "
                        f"plain decoding is always run, as the reference)")
    p.add_argument("--batches", default=DEFAULT_BATCHES, help="batch sizes (default %(default)s)")
    p.add_argument("--prompts", default=DEFAULT_PROMPTS,
                   help="prompt sets, taken in turn; at least the largest batch of them (default %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens per request (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    p.add_argument("--out", default=None, help="also write both tables to this CSV file (default: print only)")
    return p


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    batches = int_list(args.batches, "batches", 1)
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    labels = list(dict.fromkeys([BASELINE, *(args.method or DEFAULT_METHODS)]))
    runs = [parse_method(label) for label in labels]
    for name, _, _ in runs:
        if name not in batched_methods():
            raise InputError(f"--method {name}: the batch engine decodes {', '.join(batched_methods())}")
        if needs_draft_model(name) and args.drafter is None:
            raise InputError(f"--method {name} needs --drafter (a trained vanilla drafter file or layers:K)")
    prompts = in_turn(load_prompt_mix(args.prompts))
    if len(prompts) < max(batches):
        raise InputError(f"--prompts gives {len(prompts)} prompts; batch {max(batches)} needs as many")
    target = load_model(args.target)
    drafter = load_drafter(args.drafter, target).model if args.drafter else None
    tokenizer = target.tokenizer or ByteTokenizer(target.vocab_size)
    ids = [encode_prompt(p, tokenizer) for p in prompts[: max(batches)]]
    context = max(map(len, ids)) + args.max_new_tokens

    def engine(name: str, config: dict, own: str | None, batch: int) -> BatchEngine:
        return BatchEngine(name, target.model, drafter if needs_draft_model(name) else own, batch=batch,
                           context=context, **config)

    for run in runs:                                       # warm-up: kernels, allocator, first forwards
        decode(engine(*run, 2), ids[:2], 2)
    tables = []
    for batch in batches:
        for run in runs:
            bench_engine = engine(*run, batch)
            label = bench_engine.template.config.label
            tables.append(step_table(label, batch, decode(bench_engine, ids[:batch], args.max_new_tokens)))
            print(f"  batch {batch:3d} {label}: done", flush=True)
    steps = pd.concat(tables, ignore_index=True)
    runs_table, costs = summary(steps), verify_costs(steps)
    threads = torch.get_num_threads()
    print(f"\n{target.name} on {target.model.device} ({threads} threads), {args.max_new_tokens} new tokens per "
          f"request, prompts {args.prompts} in turn")
    print(runs_table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print("\nverify forward per (batch, width = query tokens per row): median seconds, and over plain decoding's")
    print(costs.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    if args.out:
        atomic.write_csv(args.out, pd.concat([runs_table.assign(table="runs"), costs.assign(table="verify")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
