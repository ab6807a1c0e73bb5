"""`python -m traces.record`: run a method over a prompt set and write StepTrace (or TokenTrace) rows.

Step mode (default): every prompt is decoded by the engine (`runtime.engine.make_decoder`) with
the method and configuration given; each speculation step becomes one StepTrace row. A step's
`accepted` counts the tokens it added to the output, so the last step is truncated at
`--max-new-tokens` / EOS exactly as the output is (and as `traces.replay` truncates).

Teacher-forced mode (`--teacher-forced`): per prompt, ONE target generation (the engine's `ar`
at the run's temperature, whose target distributions p are kept) and ONE parallel drafter pass
over prompt + output give, for every output token: its rank in the drafter's distribution q
(ties broken towards the lower token id, like argmax), the drafter's top-1 probability, q(token),
alpha = sum(min(p, q)) and the target's entropy. p and q are processed as the engine processes
them (`Sampling.probs`: temperature and top-p); at temperature 0 the decisions are argmaxes, so
alpha = 1 exactly when the drafter's argmax is the target's token, while draft_conf, q(token) and
the entropy come from the plain softmax. The drafter is a draft model (`--drafter`, for sd, mcsd,
cape) or a method's own drafter (`--method M`, e.g. an early-exit drafter's shallow layers + adapter):
whichever decoder scores a sequence with its drafter in one pass (`Decoder.drafter_logits`).

Batched mode (`--batch B`): the prompts are decoded as one continuous batch of up to B rows and
written as BatchStepTrace rows, one per (step, row), at the end of the run (`traces.batch_record`;
not resumable: a row's numbers depend on its neighbours).

Resumable: the output file is rewritten (atomically) after every prompt; a rerun with the same
arguments skips the prompts already in it, and a file from a different run is refused. Seeded:
the decoder of each prompt gets `--seed` plus a stable hash of the prompt id, so a prompt's
result does not depend on which prompts ran before it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import zlib
from pathlib import Path
from typing import Any, Sequence

import pandas as pd
import torch

from methods import BASELINE
import methods
from traces import schema
from traces.batch_record import record_batch
from runtime.engine import Decoder, Generation, Sampling, StepRecord, make_decoder
from runtime.engine.__main__ import decoder_arguments, load_drafter, own_drafter_methods
from runtime.engine.ar import AR
from runtime.engine.batch import batched_methods
from common.errors import InputError
from common.cli import CliParser, cli_entry
from common.progress import add_progress_option, progress_enabled
from common.rundir import claim_file
from runtime.models import LoadedModel, load_model
from common.rundir import git_commit
from traces.timer import hardware_name
from traces.timing import DTYPE_NAMES
from runtime.prompts import BUILTIN_SETS, ByteTokenizer, Prompt, encode_prompt, load_prompt_mix, parse_prompt_mix


def teacher_forced_methods() -> list[str]:
    """Methods whose decoder scores a sequence with its drafter in one pass (`Decoder.drafter_logits`)."""
    return [s.name for s in methods.specs() if s.decoder_class().drafter_logits is not Decoder.drafter_logits]


# ----------------------------------------------------------------------------- the run

def prompt_sets(spec: str) -> str:
    """The prompt sets `spec` draws from, in order: what a recording run is keyed on. Which prompts of
    them it records is not part of the key (each prompt's rows depend on that prompt alone), so a run
    resumed with more prompts of the same sets adds to its file."""
    return ",".join(dict.fromkeys(name for name, _, _ in parse_prompt_mix(spec)))


class Run:
    """Models, decoding law and identity of one recording run."""

    def __init__(self, args: argparse.Namespace):
        if args.max_new_tokens < 1:
            raise InputError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
        self.args = args
        self.method = args.method
        # method and configuration (JSON or label) are checked before any model is loaded
        arguments, own = decoder_arguments(self.method, args.config)
        if own is not None:
            raise InputError(f"{self.method}: give the drafter file with --drafter, not in --config")
        self.sampling = Sampling(args.temperature, args.top_p)
        if args.batch is not None:
            if args.batch < 1:
                raise InputError(f"--batch must be >= 1, got {args.batch}")
            if args.teacher_forced:
                raise InputError("--batch records steps: it does not go with --teacher-forced")
            if self.method not in batched_methods():
                raise InputError(f"--batch decodes {', '.join(batched_methods())}; got '{self.method}'")
        if args.teacher_forced and self.method not in teacher_forced_methods():
            raise InputError(f"--teacher-forced records a drafter's view: method must be one of "
                             f"{', '.join(teacher_forced_methods())}, got '{self.method}'")
        device = torch.device(args.device) if args.device else None
        self.target = load_model(args.target, device=device, seed=args.seed)
        self.tokenizer = self.target.tokenizer or ByteTokenizer(self.target.vocab_size)
        self.drafter: LoadedModel | None = None
        drafter_arg: Any = None
        if self.method in own_drafter_methods():
            drafter_arg = args.drafter
            if drafter_arg is not None and not Path(drafter_arg).exists():
                raise InputError(f"drafter file not found: {drafter_arg}")
        elif args.drafter is not None:
            self.drafter = load_drafter(args.drafter, self.target)
            drafter_arg = self.drafter.model
        self.drafter_arg, self.arguments = drafter_arg, arguments
        self.decoder = make_decoder(self.method, self.target.model, drafter_arg, sampling=self.sampling,
                                    seed=args.seed, **arguments)
        self.eos = getattr(self.target.tokenizer, "eos_token_id", None)
        self.key = {
            "mode": "token" if args.teacher_forced else "step", "method": self.method,
            "config": self.decoder.config.to_dict(), "label": self.decoder.config.label,
            "options": self.decoder.options, "target": args.target, "drafter": args.drafter,
            "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed,
            "max_new_tokens": args.max_new_tokens, "prompts": prompt_sets(args.prompts), "turn": args.turn,
            "chat": args.chat,
        }
        if args.batch is not None:        # only then: the run ids of unbatched runs stay what they were
            self.key.update(mode="batch_step", batch=args.batch)
        self.run_id = hashlib.sha1(json.dumps(self.key, sort_keys=True, default=str).encode()).hexdigest()[:12]

    @property
    def kind(self) -> str:
        return self.key["mode"]

    def metadata(self) -> schema.RunMetadata:
        models = {"target": self.args.target}
        if self.args.drafter is not None:
            models["drafter"] = self.args.drafter
        dtype = DTYPE_NAMES.get(self.target.model.dtype, str(self.target.model.dtype))
        return schema.RunMetadata(kind=self.kind, models=models, hardware=hardware_name(self.target.model.device),
                                  dtype=dtype,
                                  temperature=self.args.temperature, dataset=self.args.prompts,
                                  seed=self.args.seed, commit=git_commit(),
                                  extra={"run_key": json.loads(json.dumps(self.key, default=str)),
                                         "run_id": self.run_id, "threads": torch.get_num_threads()})

    def prompt_seed(self, prompt_id: str) -> int:
        return (self.args.seed + zlib.crc32(prompt_id.encode())) % 2**31

    def encode(self, prompt: Prompt) -> list[int]:
        """Prompt token ids at the requested turn; earlier turns are answered greedily by the target."""
        chat = None if self.args.chat == "auto" else self.args.chat == "on"
        answers: list[str] = []
        for turn in range(1, self.args.turn):
            ids = encode_prompt(prompt, self.tokenizer, turn=turn, previous_answers=answers, chat=chat)
            out = make_decoder(BASELINE, self.target.model).generate(ids, self.args.max_new_tokens, self.eos)
            answers.append(self.tokenizer.decode(out.tokens, skip_special_tokens=True))
        return encode_prompt(prompt, self.tokenizer, turn=self.args.turn, previous_answers=answers, chat=chat)

    # -- one prompt, step mode -----------------------------------------------------------------
    def step_rows(self, prompt: Prompt, ids: list[int]) -> list[dict]:
        self.decoder.seed = self.prompt_seed(prompt.prompt_id)
        out = self.decoder.generate(ids, self.args.max_new_tokens, self.eos)
        rows = []
        config = json.dumps(self.decoder.config.to_dict(), sort_keys=True)
        for s, accepted in output_steps(out):
            rows.append({"run_id": self.run_id, "method": self.method, "config": config,
                         "prompt_id": prompt.prompt_id, "step": s.step, "ctx_len": s.ctx_len,
                         "draft_forwards": s.draft_forwards, "draft_s": s.draft_s, "verify_tokens": s.verify_tokens,
                         "verify_s": s.verify_s, "overhead_s": s.overhead_s, "accepted": accepted,
                         "accept_mask": list(s.accept_mask), "confidences": list(s.confidences),
                         "mode": s.mode})
        return rows

    # -- one prompt, teacher-forced mode -------------------------------------------------------
    def token_rows(self, prompt: Prompt, ids: list[int]) -> list[dict]:
        tokens, p_logits, q_logits = teacher_forced_pass(self.decoder, ids, self.args.max_new_tokens, self.eos,
                                                         self.prompt_seed(prompt.prompt_id))
        stats = token_statistics(p_logits, q_logits, torch.tensor(tokens), self.sampling)
        return [{"run_id": self.run_id, "prompt_id": prompt.prompt_id, "pos": pos, "token": tokens[pos],
                 **{k: v[pos] for k, v in stats.items()}} for pos in range(len(tokens))]


def teacher_forced_pass(decoder, ids: list[int], max_new_tokens: int, eos: int | None,
                        seed: int) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """One target generation (engine `ar`, the decoder's sampling law) and one parallel drafter
    pass: the output tokens, the target logits and the drafter logits at each output position."""
    generator = RecordingAR(decoder.target, sampling=decoder.sampling, seed=seed)
    out = generator.generate(ids, max_new_tokens, eos)
    n = len(out.tokens)
    p_logits = torch.stack(generator.p_logits[:n])
    q_logits = decoder.drafter_logits(ids + out.tokens[:-1])[len(ids) - 1:]
    return out.tokens, p_logits, q_logits


def output_steps(out: Generation) -> list[tuple[StepRecord, int]]:
    """The steps of a generation with the tokens each added to the output (the last step is cut
    at max_new_tokens / EOS like the output; steps wholly past it are dropped)."""
    kept, steps = 0, []
    for s in out.steps:
        accepted = min(s.accepted, len(out.tokens) - kept)
        if accepted <= 0:
            break
        steps.append((s, accepted))
        kept += accepted
    return steps


class RecordingAR(AR):
    """The engine's plain autoregressive decoder, keeping the target logits of every position."""

    def start(self, prompt: list[int]) -> None:
        super().start(prompt)
        self.p_logits: list[torch.Tensor] = []

    def decide(self, t, logits, proposal):
        self.p_logits.append(logits[0].detach())
        return super().decide(t, logits, proposal)


def token_statistics(p_logits: torch.Tensor, q_logits: torch.Tensor, tokens: torch.Tensor,
                     sampling: Sampling) -> dict[str, list]:
    """Per-position TokenTrace columns from target and drafter logits [n, V] and the tokens [n]."""
    p, q = sampling.probs(p_logits), sampling.probs(q_logits)
    tokens = tokens.to(q.device)
    q_tok = q.gather(1, tokens[:, None])
    ids = torch.arange(q.shape[1], device=q.device)[None]
    rank = ((q > q_tok) | ((q == q_tok) & (ids < tokens[:, None]))).sum(1)
    if sampling.greedy:
        alpha = (q.argmax(1) == p.argmax(1)).double()
    else:
        alpha = torch.minimum(p, q).sum(1).clamp(0.0, 1.0)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(1)
    return {"draft_rank": rank.tolist(), "draft_conf": q.max(1).values.clamp(0, 1).tolist(),
            "draft_q_token": q_tok[:, 0].clamp(0, 1).tolist(), "alpha": alpha.tolist(),
            "target_entropy": entropy.clamp_min(0).tolist()}


def existing_rows(path: Path, run: Run, overwrite: bool = False) -> pd.DataFrame | None:
    """The rows of an earlier run of the same arguments at `path`, or None; another run -> error
    (None with `overwrite`: it is replaced)."""
    if not path.exists():
        return None
    try:
        frame, meta = schema.read_trace(path)
    except InputError as exc:
        if overwrite:
            return None
        raise InputError(f"{path} holds no trace of this recording run ({exc}); use another --out, or --overwrite "
                         "to replace it") from None
    if meta.kind != run.kind or meta.extra.get("run_id") != run.run_id:
        if overwrite:
            return None
        raise InputError(f"{path} holds a different recording run (other method, models or options); "
                         "use another --out to start a new one, or --overwrite to replace it")
    return frame


# ----------------------------------------------------------------------------- command line

def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m traces.record", description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="target model spec: smollm2, tiny[:seed], random:<arch>, path, hub id")
    p.add_argument("--drafter", default=None,
                   help="a draft model spec or layers:K (the target's first K layers); for methods with their own "
                        f"drafter ({', '.join(own_drafter_methods())}): a drafter file (default: an untrained drafter "
                        "built from the options drafter_seed, drafter_std)")
    p.add_argument("--method", required=True, help=f"one of {', '.join(methods.names())}")
    p.add_argument("--config", default="",
                   help='method configuration as JSON (config keys and decoder options), e.g. \'{"gamma": 4}\', '
                        'or as its label, e.g. "mcsd k4x2x1 repl" (default: the defaults)')
    p.add_argument("--prompts", required=True,
                   help=f"a bundled prompt set ({', '.join(BUILTIN_SETS)}) or a JSONL file, or parts of them "
                        "(e.g. mtbench:1-12,mtbench:20-24)")
    p.add_argument("--field", default="prompt", help="text field of a local JSONL file (default %(default)s)")
    p.add_argument("--limit", type=int, default=None, help="only the first N of those prompts (default: all)")
    p.add_argument("--turn", type=int, default=1, help="user turn to record (2 = MT-Bench's second turn)")
    p.add_argument("--chat", choices=["auto", "on", "off"], default="auto",
                   help="apply the tokenizer's chat template (auto: when it has one)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate per prompt (default %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default %(default)s)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="base seed; each prompt adds a hash of its id")
    p.add_argument("--teacher-forced", action="store_true", help="write TokenTrace rows instead of StepTrace rows")
    p.add_argument("--batch", type=int, default=None,
                   help="decode the prompts as one continuous batch of up to B rows (runtime.engine.batch) and write "
                        "BatchStepTrace rows, once at the end (not resumable; default: one prompt at a time)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own choice)")
    p.add_argument("--out", required=True, help="output parquet file (resumed if it holds this run)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out when it holds another recording run, instead of refusing (a file of this "
                        "same run is resumed without it)")
    add_progress_option(p)
    p.add_argument("--quiet", dest="progress", action="store_const", const=False, default=None,
                    help="the same as --no-progress")
    return p


@cli_entry
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise InputError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.turn < 1:
        raise InputError(f"--turn must be >= 1, got {args.turn}")
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit must be >= 1, got {args.limit}")
    prompts = load_prompt_mix(args.prompts, field=args.field)[:args.limit]
    out = claim_file(args.out, args.overwrite, resumable=args.batch is None)
    run = Run(args)
    if args.batch is not None:
        rows = record_batch(run, prompts)
        schema.write_trace(out, pd.DataFrame(rows, columns=list(schema.BATCH_STEP_COLUMNS)), run.metadata())
        if args.progress is not False:
            print(f"{out}: {len(prompts)} prompt(s) decoded in batches of up to {args.batch}, {len(rows)} batch_step rows")
        return 0
    previous = existing_rows(out, run, args.overwrite)
    rows: list[dict] = [] if previous is None else previous.to_dict("records")
    done = set() if previous is None else set(previous["prompt_id"])
    todo = [p for p in prompts if p.prompt_id not in done]
    from tqdm import tqdm

    metadata = run.metadata()
    columns = list(schema.CONTRACTS[run.kind])
    for prompt in tqdm(todo, disable=not progress_enabled(args.progress), unit="prompt", desc=f"record {run.method}"):
        ids = run.encode(prompt)
        rows += run.token_rows(prompt, ids) if args.teacher_forced else run.step_rows(prompt, ids)
        schema.write_trace(out, pd.DataFrame(rows, columns=columns), metadata)
    if args.progress is not False:      # the result line, left out with --quiet / --no-progress
        print(f"{out}: {len(done)} prompt(s) already recorded, {len(todo)} recorded now, {len(rows)} {run.kind} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
