"""The engine's one interface: propose -> verify -> commit, with KV-cache rollback and step timing.

State of a decoder between steps: `tokens` (prompt + generated, all committed); the target cache
holds every committed token except the last one, the *pending* token, which the next verification
forward takes as the root of the draft tree. A step:
  1. `propose()` -> `Proposal`: a token tree (rules.TokenTree) hanging off the pending token, q rows
     when the drafts were sampled from a drafter, the drafter confidences and forward count. A
     method with a draft model writes it as a generator that yields each drafter forward it needs
     (a `Feed`) and receives its logits: alone each runs on the drafter's own cache (`run_alone`), in
     a batch every row's feed of a round runs as one forward (`runtime.engine.batch`);
  2. `verify(proposal)` -> (`Verdict`, p logits): one target forward over [pending] + tree nodes with
     the ancestor mask and positions root + depth, then the rules (`engine.verify`);
  3. `commit(proposal, verdict)`: keep the prefix and the accepted path in the target cache
     (`KVCache.keep`), then `accept`: append the verdict's tokens, methods roll their own drafter
     state back (a batch keeps every row's path at once, then lets each row `accept`).
Mode (`runtime.cache.MODES`, `use_mode`): eager caches (the default), static caches, or static caches
whose forwards are padded to width buckets and replayed as CUDA graphs (`runtime.graph`); the
engine code is the same in all three, every forward goes through the model with its cache.
Timing: draft (propose) and verify (the target forward) are timed regions, overhead is the rest
of the step (sampling, tree building, cache edits). On a GPU the timer synchronises only at the
borders of timed regions, so nothing else is serialised.
"""
from __future__ import annotations

import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import torch

from verification import rules
from runtime.engine import tree as tree_geo
from runtime.engine.verify import Sampling, TorchSource, greedy_verdict, sampled_verdict
from runtime.cache import STEP_ROOM, check_mode
from runtime.ragged import RowInput
from runtime.graph import GraphRunner
from common.errors import InputError
import methods
from methods.config import MethodConfig
from runtime.llama import Llama


@dataclass
class Proposal:
    tree: rules.TokenTree
    q_rows: torch.Tensor | None = None      # [nodes, vocab] processed drafter distributions (sampled drafts)
    confidences: list[float] = field(default_factory=list)  # drafter top-1 prob per drafted position
    draft_forwards: int = 0
    naive: bool = False                     # candidates not drawn from q (CAPE sets, n-grams): one-hot drafts


@dataclass
class Feed(RowInput):
    """One drafter forward a proposal asks for (`RowInput`: tokens, their positions, the tail mask
    over the cache's last keys) on the drafter cache of `state`, the
    `runtime.engine.draft_model.DrafterState` that asked. What comes back is its logits [n, vocab]."""

    state: Any = None


Proposing = Generator[Feed, torch.Tensor, Proposal]   # a propose() that asks for drafter forwards


def run_alone(feeding: Any) -> Any:
    """What a generator of `Feed`s (a `propose()`, a drafter's catch-up) returns when run alone:
    each forward it asks for runs on its drafter's own cache. Anything else is returned as it is."""
    if not isinstance(feeding, Generator):
        return feeding
    try:
        feed = next(feeding)
        while True:
            feed = feeding.send(feed.state.run(feed))
    except StopIteration as done:
        return done.value


def accept_mask(proposal: Proposal, verdict: rules.Verdict) -> list[bool]:
    """Per drafted position of the tree's depth: whether the verdict accepted it."""
    depth = max(tree_geo.depths(proposal.tree.parents))
    return [i < verdict.n_accepted for i in range(depth)]


@dataclass
class StepRecord:
    """One speculation step; the StepTrace fields that belong to a step (see traces.schema)."""

    step: int
    ctx_len: int
    draft_forwards: int
    draft_s: float
    verify_tokens: int
    verify_s: float
    overhead_s: float
    accepted: int
    accept_mask: list[bool]
    confidences: list[float]
    mode: str = "eager"                     # runtime mode that produced the step (runtime.cache.MODES)


@dataclass
class Generation:
    prompt_len: int
    tokens: list[int]                       # generated tokens only
    steps: list[StepRecord]
    seconds: float


class StepTimer:
    """Wall-clock regions of one step; synchronises the GPU at region borders only."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.totals: dict[str, float] = {}

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def region(self, name: str):
        timer = self

        class _Region:
            def __enter__(self):
                timer._sync()
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                timer._sync()
                timer.totals[name] = timer.totals.get(name, 0.0) + time.perf_counter() - self.start

        return _Region()


class Decoder:
    """Base class of every method. Subclasses set `method` (the registry name of the method they
    decode by default), the drafter flags, their construction `options` and write `propose`.
    `self.spec` is the method that chose the decoder (`make_decoder` passes it, so a method that
    reuses another's decoder runs with its own configuration), `self.config` its typed config (one
    set of defaults), `self.options` the decoder's own options."""

    method = "base"
    needs_drafter = False        # the drafter argument must be a draft model (a Llama)
    own_drafter = False          # the drafter argument is the method's own module or file (None: untrained)
    options: dict[str, Any] = {}  # construction options beyond the method config, with their defaults
    batchable = False            # `runtime.engine.batch` may decode it (its verify and commit are these)
    draft = None                 # the `DrafterState` its proposals feed, set at start by methods that draft

    def __init__(self, target: Llama, drafter: Llama | None = None, *, sampling: Sampling | None = None,
                 seed: int = 0, spec: "methods.MethodSpec | None" = None, **config: Any):
        self.spec = spec or methods.get(self.method)     # the method that chose this decoder, and its config
        self.method = self.spec.name
        if self.needs_drafter and drafter is None:
            raise InputError(f"method '{self.method}' needs a drafter model")
        if drafter is not None and drafter.config.vocab_size != target.config.vocab_size:
            raise InputError(f"drafter vocabulary size {drafter.config.vocab_size} differs from the target's "
                             f"{target.config.vocab_size}")
        self.target, self.drafter = target, drafter
        self.sampling = sampling or Sampling()
        self.seed = seed
        self.config, self.options = self.split_config(config, self.spec)
        self.check_config()
        self.mode, self.runner, self.budget = "eager", None, 256
        self._caches: dict[str, Any] = {}

    def use_mode(self, mode: str) -> "Decoder":
        """Run in `mode` (eager, static, graph) from the next `start` on; graph gets a `GraphRunner`."""
        self.mode = check_mode(mode)
        self.runner = GraphRunner(self.target.device) if mode == "graph" else None
        self._caches = {}
        return self

    def new_cache(self, name: str, module: Any, prompt_len: int):
        """The KV cache `name` of `module` (its `new_cache`) for a prompt of `prompt_len` tokens.

        Eager: a fresh growing cache (room for 64 more tokens, as always). Static and graph: a
        fixed cache with room for the prompt, `budget` new tokens and one step's widest forward,
        reused (emptied) across prompts while it is large enough, so captured graphs are reused.
        """
        if self.mode == "eager":
            return module.new_cache(capacity=prompt_len + 64)
        capacity = prompt_len + self.budget + STEP_ROOM
        old = self._caches.get(name)
        if old is not None and old.capacity >= capacity:
            old.reset()
            return old
        if old is not None and self.runner is not None:
            self.runner.forget(old)
        cache = self._caches[name] = module.new_cache(capacity=capacity, mode=self.mode, runner=self.runner)
        return cache

    # -- configuration ---------------------------------------------------------------------------
    @classmethod
    def split_config(cls, config: dict[str, Any], spec: "methods.MethodSpec | None" = None
                     ) -> tuple[MethodConfig, dict[str, Any]]:
        """(typed method config, options): the keys of `spec`'s config class (this decoder's own method
        by default; strict), the rest must be this decoder's `options`; checkable before any model is
        loaded."""
        spec = spec or methods.get(cls.method)
        typed, options = spec.config.split(config, cls.options, "decoder option")
        return typed, {**cls.options, **options}

    def check_config(self) -> None:
        """Checks of the options, and those that need the models as well as the config (override)."""

    @property
    def replacement(self) -> bool:
        """Whether sampled drafts of one node were drawn with replacement (MCSS); chains draw one."""
        return True

    def drafter_logits(self, ids: list[int]) -> torch.Tensor:
        """The drafter's logits at every position of `ids` in one causal pass [len(ids), vocab]
        (teacher-forced recording); methods whose drafter can score a sequence alone override it."""
        raise InputError(f"method '{self.method}' has no drafter that scores a sequence in one pass")

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, prompt: list[int]) -> None:
        """Reset all state and prefill the target with the prompt minus its last (pending) token."""
        self.reset(prompt)
        if len(prompt) > 1:
            with torch.no_grad():
                self.target(self._ids(prompt[:-1]), self.target_cache, logits=False)
        self.start_drafter(prompt)

    def reset(self, prompt: list[int]) -> None:
        """Fresh random source, tokens and (empty) target cache for `prompt`."""
        if not prompt:
            raise InputError("prompt is empty")
        self.rng = TorchSource(self.seed)
        self.tokens = list(prompt)
        self.target_cache = self.new_cache("target", self.target, len(prompt))

    def start_drafter(self, prompt: list[int]) -> None:
        """Methods with a drafter set up its state here (default: nothing)."""

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        return torch.tensor([tokens], dtype=torch.long, device=self.target.device)

    # -- one step --------------------------------------------------------------------------------
    def propose(self) -> Proposal | Proposing:
        raise NotImplementedError

    def verify(self, proposal: Proposal) -> tuple[rules.Verdict, int]:
        """One target forward over the pending token and the tree; return the verdict and query count."""
        t = proposal.tree
        past = self.target_cache.length
        with self.timer.region("verify"), torch.no_grad():
            local = tree_geo.ancestor_mask(t.parents)
            positions = torch.tensor([past + d for d in tree_geo.depths(t.parents)], device=self.target.device)
            logits = self.target(self._ids([self.tokens[-1], *t.tokens[1:]]), self.target_cache,
                                  position_ids=positions, mask=tree_geo.with_prefix(past, local)).logits[0]
        return self.decide(t, logits, proposal), t.size

    def decide(self, t: rules.TokenTree, logits: torch.Tensor, proposal: Proposal) -> rules.Verdict:
        if self.sampling.greedy:
            return greedy_verdict(t, logits)
        return sampled_verdict(t, self.sampling.probs(logits), proposal.q_rows, self.rng,
                               replacement=self.replacement, naive=proposal.naive)

    def commit(self, proposal: Proposal, verdict: rules.Verdict) -> None:
        """Keep the pending token and the accepted path in the target cache; append the tokens."""
        start = self.root_index  # cache index of the pending token's entry
        self.target_cache.keep(start + 1, [start + node for node in verdict.path])
        self.accept(proposal, verdict)

    def accept(self, proposal: Proposal, verdict: rules.Verdict) -> None:
        """The verdict's tokens join the output and the method rolls its state back; the target
        cache's edit is the caller's (`commit` alone, `runtime.engine.batch` for every row at once)."""
        self.tokens.extend(verdict.tokens)
        self.after_commit(proposal, verdict)

    def after_commit(self, proposal: Proposal, verdict: rules.Verdict) -> None:
        """Methods roll their drafter state back here (default: nothing)."""

    def step(self, index: int) -> StepRecord:
        self.timer = StepTimer(self.target.device)
        ctx_len = len(self.tokens)
        begin = time.perf_counter()
        with self.timer.region("draft"):
            proposal = run_alone(self.propose())
        self.root_index = self.target_cache.length
        verdict, verify_tokens = self.verify(proposal)
        self.commit(proposal, verdict)
        total = time.perf_counter() - begin
        draft_s, verify_s = self.timer.totals.get("draft", 0.0), self.timer.totals.get("verify", 0.0)
        return StepRecord(index, ctx_len, proposal.draft_forwards, draft_s, verify_tokens, verify_s,
                          max(total - draft_s - verify_s, 0.0), len(verdict.tokens), accept_mask(proposal, verdict),
                          [float(c) for c in proposal.confidences], self.mode)

    def generate(self, prompt: list[int], max_new_tokens: int, eos_token_id: int | None = None) -> Generation:
        """Decode up to `max_new_tokens` tokens (stopping after `eos_token_id`)."""
        if max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        begin = time.perf_counter()
        self.budget = max_new_tokens
        self.start(prompt)
        steps: list[StepRecord] = []
        while len(self.tokens) - len(prompt) < max_new_tokens:
            steps.append(self.step(len(steps)))
            if eos_token_id is not None and eos_token_id in self.tokens[len(prompt):]:
                break
        out = self.tokens[len(prompt):][:max_new_tokens]
        if eos_token_id is not None and eos_token_id in out:
            out = out[: out.index(eos_token_id) + 1]
        overshoot = len(self.tokens) - len(prompt) - len(out)
        if overshoot:  # the last step's tokens past the limit are not part of the output
            steps[-1].accepted -= overshoot
        return Generation(len(prompt), out, steps, time.perf_counter() - begin)
