"""`python -m traces.check_replay`: does exact replay from a TokenTrace match real engine runs?

For every prompt: one teacher-forced pass (`traces.record.teacher_forced_pass`) gives the token
table; then every configuration runs for real in the engine. Each real step, starting at output
position p, is compared with the replayed accepted length of a step starting at p
(`traces.replay.accept_lengths`), so one disagreement never shifts the comparison of later steps.

Every mismatch is explained from the recorded margins:
- `output diverged`: the real run's output left the teacher-forced greedy output before the end
  of the step (a target near-tie decided differently by the tree/incremental forward than by the
  plain one); the target's top-2 probability gap there is given;
- `drafter near-tie`: at the first position where the real and the replayed step disagree, the
  drafter's top-2 (or rank-k / rank-k+1) probability gap in the parallel pass is tiny, so the
  incremental drafter forward ranked the tokens differently;
- `unexplained`: neither; this would be a bug in the engine or in the replay.
Writes `steps.csv` (every compared step) and `report.md` to `--out`; exit code 1 when agreement
is below `--min-agreement`. A step that accepts no draft commits the target's own token whatever
the drafter proposed, so it agrees trivially: when no step accepted a draft the run checked
nothing and is refused (exit code 2, the files kept for inspection), and a configuration without
an accepted draft is named in the report and on stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from common import atomic
from methods.config import MethodConfig
from traces import replay
from runtime.engine import Sampling, make_decoder
from runtime.engine.__main__ import check_drafter_spec, load_drafter, own_drafter_methods, parse_method
import methods
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.progress import add_progress_option, progress_bar, progress_enabled
from common.rundir import add_overwrite_option, start_run
from runtime.models import load_model
from runtime.prompts import BUILTIN_SETS, ByteTokenizer, encode_prompt, load_prompt_mix
from traces.record import output_steps, teacher_forced_methods, teacher_forced_pass, token_statistics

DRAFT_MODEL = "draft_model"     # the drafter kind a `--drafter layers:K` truncation is
NEAR_TIE = 1e-3  # probability gap under which a flipped ranking is put down to numerics


def default_configs() -> list[str]:
    """The calibration configurations of every checkable method that drafts with a draft model."""
    return [c.label for m in checkable_methods() for c in methods.get(m).calibration_configs()
            if DRAFT_MODEL in methods.get(m).drafter_kinds]


def checkable_methods() -> list[str]:
    """Methods a TokenTrace replays whose drafter a teacher-forced pass can record."""
    return [m for m in replay.replayable() if m in teacher_forced_methods()]


def top_gaps(logits: torch.Tensor, depth: int = 9) -> np.ndarray:
    """[n, depth-1] probability gaps between consecutive ranks of softmax(logits) per row."""
    probs = torch.softmax(logits.double(), dim=-1)
    top = probs.topk(min(depth, probs.shape[-1]), dim=-1).values
    return (top[:, :-1] - top[:, 1:]).cpu().numpy()


class PromptRecord:
    """The teacher-forced view of one prompt under one drafter."""

    def __init__(self, prompt_id: str, tokens: list[int], table: replay.TokenTable, p_gap: np.ndarray,
                 q_gaps: np.ndarray):
        self.prompt_id, self.tokens, self.table = prompt_id, tokens, table
        self.p_gap, self.q_gaps = p_gap, q_gaps


def teacher_forced(decoder, prompt_id: str, ids: list[int], max_new_tokens: int, eos) -> PromptRecord:
    tokens, p_logits, q_logits = teacher_forced_pass(decoder, ids, max_new_tokens, eos, seed=0)
    stats = token_statistics(p_logits, q_logits, torch.tensor(tokens), Sampling())
    table = replay.TokenTable.from_arrays([prompt_id], [0, len(tokens)], stats["draft_rank"], stats["draft_conf"],
                                          tokens)
    return PromptRecord(prompt_id, tokens, table, top_gaps(p_logits)[:, 0], top_gaps(q_logits))


def explain(rec: PromptRecord, config: MethodConfig, pos: int, real: int, replayed: int,
            real_tokens: list[int]) -> str:
    """Why a real step at output position `pos` committed `real` tokens where replay says `replayed`."""
    span = pos + max(real, replayed)
    diverged = next((i for i, (a, b) in enumerate(zip(real_tokens, rec.tokens)) if a != b), None)
    if diverged is not None and diverged < span:
        return f"output diverged at token {diverged} (target top-2 gap {rec.p_gap[diverged]:.2e})"
    level = min(real, replayed) - 1          # the first drafted level whose verdict differs
    at = pos + level
    if at >= len(rec.tokens):
        return "unexplained (past the recorded output)"
    levels = getattr(config, "k", (1,))     # drafter candidates per level: a tree's k, one for a chain
    k = levels[min(level, len(levels) - 1)]
    gap = rec.q_gaps[at, min(k - 1, rec.q_gaps.shape[1] - 1)]
    what = "top-2" if k == 1 else f"rank {k - 1}/{k}"
    if gap < NEAR_TIE:
        return f"drafter near-tie at token {at} ({what} gap {gap:.2e})"
    return f"unexplained (drafter {what} gap {gap:.2e} at token {at})"


def compare(rec: PromptRecord, config: MethodConfig, out) -> list[dict]:
    """One row per real step: real and replayed accepted length, and the explanation if they differ."""
    lengths = replay.accept_lengths(rec.table, config.method, config)
    rows, pos = [], 0
    for step, accepted in output_steps(out):
        replayed = int(lengths[pos]) if pos < rec.table.size else -1
        same = replayed == accepted
        rows.append({"prompt_id": rec.prompt_id, "method": config.method, "config": config.label,
                     "step": step.step, "pos": pos, "real": accepted, "replayed": replayed, "agree": same,
                     "why": "" if same else explain(rec, config, pos, accepted, replayed, out.tokens)})
        pos += accepted
    return rows


def report(frame: pd.DataFrame, args: argparse.Namespace) -> str:
    by_config = frame.groupby(["method", "config"], sort=False).agg(
        steps=("agree", "size"), agree=("agree", "sum"), real_mean=("real", "mean"),
        replayed_mean=("replayed", "mean")).reset_index()
    by_config["agreement"] = by_config["agree"] / by_config["steps"]
    by_config["drafts_accepted_in"] = frame.assign(hit=frame["real"] > 1).groupby(
        ["method", "config"], sort=False)["hit"].sum().to_numpy()
    overall = frame["agree"].mean()
    lines = [
        "# Replay vs real runs", "",
        f"target `{args.target}`, drafter `{args.drafter}`, prompts `{args.prompts}`, "
        f"{args.max_new_tokens} new tokens, greedy, {args.threads} thread(s).", "",
        f"**Agreement: {frame['agree'].sum()} of {len(frame)} steps = {overall:.2%}** "
        f"(threshold {args.min_agreement:.0%}).", "",
        by_config.to_markdown(index=False, floatfmt=".3f") if _has_tabulate() else by_config.to_string(index=False),
        "",
    ]
    unchecked = unchecked_configs(frame)
    if unchecked:
        lines += [f"**Not checked: {', '.join(unchecked)}**: no step accepted a draft, so every step committed the "
                  "target's own token and agreed whatever the replay computes.", ""]
    bad = frame[~frame["agree"]]
    lines += ["## Mismatches", ""]
    if bad.empty:
        lines.append("None.")
    for row in bad.itertuples():
        lines.append(f"- {row.prompt_id} {row.method} {row.config} step {row.step} (token {row.pos}): "
                     f"real {row.real}, replayed {row.replayed}: {row.why}")
    return "\n".join(lines) + "\n"


def unchecked_configs(frame: pd.DataFrame) -> list[str]:
    """Configurations none of whose steps accepted a draft: their agreement checks nothing."""
    hits = frame.assign(hit=frame["real"] > 1).groupby("config", sort=False)["hit"].any()
    return [str(c) for c, hit in hits.items() if not hit]


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m traces.check_replay", description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2", help="target model spec (default %(default)s)")
    p.add_argument("--drafter", default="layers:4",
                   help="draft model spec, or layers:K = the target's first K layers (default %(default)s, which "
                        "SmolLM2 rejects almost always: a run where no draft is accepted checks nothing and is "
                        "refused; the trained vanilla drafter is the one to check with)")
    p.add_argument("--prompts", default="mtbench:2,humaneval:2",
                   help=f"prompt sets ({', '.join(BUILTIN_SETS)} or a JSONL path) as name:count joined by commas "
                        "(default %(default)s)")
    p.add_argument("--methods", nargs="+", default=default_configs(),
                   help="configurations as labels or method:{json} of checkable methods "
                        f"({', '.join(checkable_methods())}); default: {', '.join(default_configs())}")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per prompt (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    p.add_argument("--min-agreement", type=float, default=0.99,
                   help="exit 1 when the share of agreeing steps is below this fraction in [0, 1] (default %(default)s)")
    p.add_argument("--out", required=True, help="folder for steps.csv and report.md; one holding another run's files is refused unless --overwrite")
    add_overwrite_option(p)
    add_progress_option(p)
    return p


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not 0 <= args.min_agreement <= 1:  # also refuses nan
        raise InputError(f"--min-agreement is {args.min_agreement}, must be a fraction in [0, 1] (0.99 = 99%)")
    if args.threads < 1:
        raise InputError(f"--threads is {args.threads}, must be >= 1")
    check_drafter_spec(args.drafter)
    torch.set_num_threads(args.threads)
    runs = [parse_method(m) for m in args.methods]      # valid configurations of registered methods
    checkable = checkable_methods()
    for name, _, _ in runs:
        if name not in checkable:
            raise InputError(f"method {name} cannot be checked (replayable, with a drafter that scores a "
                             f"sequence in one pass: {', '.join(checkable)})")
    prompts = load_prompt_mix(args.prompts)
    start_run(args.out, "traces.check_replay", argv, args.overwrite)
    target = load_model(args.target)
    drafter = load_drafter(args.drafter, target)
    tokenizer = target.tokenizer or ByteTokenizer(target.vocab_size)
    eos = getattr(target.tokenizer, "eos_token_id", None)
    decoders = [(own, make_decoder(name, target.model, own if name in own_drafter_methods() else drafter.model,
                                   sampling=Sampling(), **config)) for name, config, own in runs]
    rows: list[dict] = []
    bar = progress_bar(len(prompts), "check replay", progress_enabled(args.progress), unit="prompt")
    for prompt in prompts:
        ids = encode_prompt(prompt, tokenizer)
        records: dict[str, PromptRecord] = {}
        for own, decoder in decoders:   # one teacher-forced pass per drafter: the shared one, or each own one
            key = json.dumps([own, decoder.config.to_dict(), decoder.options]) if decoder.own_drafter else "drafter"
            if key not in records:
                records[key] = teacher_forced(decoder, prompt.prompt_id, ids, args.max_new_tokens, eos)
            out = decoder.generate(ids, args.max_new_tokens, eos)
            rows += compare(records[key], decoder.config, out)
        bar.update()
    bar.close()
    frame = pd.DataFrame(rows)
    out_dir = Path(args.out)
    atomic.write_csv(out_dir / "steps.csv", frame)
    text = report(frame, args)
    atomic.write_text(out_dir / "report.md", text)
    agreement = frame["agree"].mean()
    print(text.split("## Mismatches")[0].strip())
    print(f"mismatches: {int((~frame['agree']).sum())}; report: {out_dir / 'report.md'}")
    unchecked = unchecked_configs(frame)
    if len(unchecked) == frame["config"].nunique():
        raise InputError(f"no draft of drafter '{args.drafter}' was accepted in {len(frame)} steps: every step "
                         "committed the target's own token, so the agreement checks nothing; use a drafter that "
                         "agrees with the target (e.g. the trained one: python -m training vanilla, then --drafter "
                         "artifacts/drafters/vanilla/vanilla.safetensors)")
    if unchecked:
        print(f"warning: not checked (no draft accepted): {', '.join(unchecked)}", file=sys.stderr)
    return 0 if agreement >= args.min_agreement else 1


if __name__ == "__main__":
    sys.exit(main())
