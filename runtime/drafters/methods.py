"""The engine decoders of `glide` and `coral` (named by methods/glide.py, coral.py) and what every
decoder with its own drafter shares (`resolve_drafter`, `UNTRAINED` options, `start_keeping_prefill`).

They verify with the engine's own path (`Decoder.decide` -> `verification.rules`), so the output
is the target's greedy sequence at temperature 0 and the target's law when sampling, whatever the
drafter's weights. The drafter argument of `make_decoder` may be a drafter module, the path of a
safetensors file (`runtime.drafters.io`), or None for an untrained drafter seeded by
`drafter_seed` (weights N(0, drafter_std)).

- glide: the draft-model chain of `sd` (or, given `bins`, the expansion sets of `cape`) with a
  GLIDE drafter; its cross-attention reads the target cache as left by the last verification.
- coral: the EAGLE-style feature drafter drafts a chain of `gamma` from the target's features;
  `groups`/`top_n` (N, top-n) switch on CORAL's LM-head router.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from verification import rules
from runtime.drafters.coral import FeatureDrafter
from runtime.drafters.glide import GlideDrafter
from runtime.drafters.io import load_drafter
from runtime.engine.base import Decoder, Proposal
from runtime.engine.draft_methods import CAPE, SD, DrafterState
from common.errors import InputError
from runtime.llama import Llama


def resolve_drafter(kind: type, drafter: Any, target: Llama, build) -> Any:
    """A drafter module of class `kind`: given, loaded from a file, or built untrained by `build()`."""
    if drafter is None:
        return build()
    if isinstance(drafter, (str, Path)):
        drafter = load_drafter(drafter, target)
    if not isinstance(drafter, kind):
        raise InputError(f"expected a {kind.kind} drafter, got {type(drafter).__name__}")
    return drafter


def _int_option(method: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{method}: {name} must be an integer >= {low}, got {value!r}")
    return value


UNTRAINED = {"drafter_seed": 0, "drafter_std": 0.02}   # options of the untrained drafter built without one


def check_untrained(decoder: Decoder) -> None:
    """Check (in place) the `UNTRAINED` options of a decoder with its own drafter."""
    o, method = decoder.options, decoder.method
    o["drafter_seed"] = _int_option(method, "drafter_seed", o["drafter_seed"], 0)
    std = o["drafter_std"]
    if isinstance(std, bool) or not isinstance(std, (int, float)) or not std > 0:
        raise InputError(f"{method}: drafter_std must be a positive number, got {std!r}")
    o["drafter_std"] = float(std)


def start_keeping_prefill(decoder: Decoder, prompt: list[int], **forward_options: Any):
    """`Decoder.start`, but with the prefill forward run here so that its output (hidden states,
    features) is kept: the prompt minus its pending last token goes through the target once.
    Returns that ForwardOutput (None for a one-token prompt)."""
    decoder.reset(prompt)
    if len(prompt) == 1:
        return None
    with torch.no_grad():
        return decoder.target(decoder._ids(prompt[:-1]), decoder.target_cache, logits=False, **forward_options)


# ------------------------------------------------------------------------------------------ glide

class GlideState(DrafterState):
    """`DrafterState` for a GLIDE drafter: every forward also reads the target's current cache."""

    def __init__(self, model: GlideDrafter, decoder: Decoder, cache):
        super().__init__(model, cache)
        self.decoder = decoder

    def feed(self, tokens: list[int], positions: torch.Tensor | None = None,
             mask: torch.Tensor | None = None) -> torch.Tensor:
        target = self.decoder.target
        ids = torch.tensor([tokens], dtype=torch.long, device=target.device)
        with torch.no_grad():
            if self.cache.static:
                return self.model.static_draft(ids, self.decoder.target_cache, target.rope, self.cache,
                                               positions, mask)[0]
            out = self.model(ids, self.model.target_kv(self.decoder.target_cache), target.rope,
                             cache=self.cache, position_ids=positions, mask=mask)
        return out.logits[0]


class Glide(CAPE):
    """GLIDE drafter; a chain like `sd`, or CAPE's expansion sets when `bins` is given."""

    method = "glide"
    needs_drafter, own_drafter = False, True
    options = {"layers": 1, "hidden": None, **UNTRAINED}
    drafter_logits = Decoder.drafter_logits     # its drafter reads the target's cache: no pass of its own

    def __init__(self, target: Llama, drafter: Any = None, *, sampling=None, seed: int = 0, **config: Any):
        super().__init__(target, None, sampling=sampling, seed=seed, **config)
        o = self.options
        self.drafter = resolve_drafter(GlideDrafter, drafter, target, lambda: GlideDrafter.for_target(
            target, seed=o["drafter_seed"], std=o["drafter_std"], num_layers=o["layers"], hidden_size=o["hidden"]))
        if self.drafter.config.vocab_size != target.config.vocab_size:
            raise InputError(f"GLIDE drafter vocabulary size {self.drafter.config.vocab_size} differs from the "
                             f"target's {target.config.vocab_size}")

    def check_config(self) -> None:
        o = self.options
        o["layers"] = _int_option("glide", "layers", o["layers"], 1)
        o["hidden"] = None if o["hidden"] is None else _int_option("glide", "hidden", o["hidden"], 1)
        check_untrained(self)

    def start_drafter(self, prompt: list[int]) -> None:
        self.draft = GlideState(self.drafter, self, self.new_cache("drafter", self.drafter, len(prompt)))

    def propose(self) -> Proposal:
        return SD.propose(self) if self.config.bins is None else CAPE.propose(self)


# ----------------------------------------------------------------------------------------- coral

class Coral(Decoder):
    """EAGLE-style feature drafter (chain of `gamma`) with CORAL's optional LM-head router."""

    method = "coral"
    own_drafter = True
    options = dict(UNTRAINED)

    def __init__(self, target: Llama, drafter: Any = None, *, sampling=None, seed: int = 0, **config: Any):
        super().__init__(target, None, sampling=sampling, seed=seed, **config)
        groups, top_n, o = self.config.groups, self.config.top_n, self.options
        self.feature_drafter = resolve_drafter(FeatureDrafter, drafter, target, lambda: FeatureDrafter.for_target(
            target, router_groups=groups, router_top_n=top_n, seed=o["drafter_seed"], std=o["drafter_std"]))
        have = self.feature_drafter.config
        if drafter is not None and (have.router_groups, have.router_top_n) != (groups, top_n):
            if have.router_groups == groups and groups:   # same trained router, another top-n
                self.feature_drafter.router.top_n = top_n
            elif groups == 0 or have.router_groups == 0:
                self.feature_drafter = self.feature_drafter.with_router(groups, top_n, seed=o["drafter_seed"])
            else:
                raise InputError(f"coral: the drafter's router has {have.router_groups} groups, "
                                 f"the configuration asks for {groups}")

    def check_config(self) -> None:
        groups, vocab = self.config.groups, self.target.config.vocab_size
        if groups > vocab:
            raise InputError(f"coral: groups must be at most the vocabulary size {vocab}, got {groups}")
        check_untrained(self)

    def start(self, prompt: list[int]) -> None:
        """Prefill keeping the target's features f_0..f_{n-2} (EAGLE reads f_{s-1} at position s)."""
        out = start_keeping_prefill(self, prompt)
        hidden = self.target.config.hidden_size
        self.features = torch.zeros(1, 1, hidden, dtype=self.target.dtype, device=self.target.device)  # f_{-1} = 0
        if out is not None:
            self.features = torch.cat([self.features, out.hidden], dim=1)
        self.draft_cache = self.new_cache("drafter", self.feature_drafter, len(prompt))

    def _draft(self, tokens: list[int], prev_features: torch.Tensor, start: int) -> torch.Tensor:
        positions = torch.arange(start, start + len(tokens), device=self.target.device)
        return self.feature_drafter(self._ids(tokens), prev_features, self.target, self.draft_cache, positions)

    def propose(self) -> Proposal:
        gamma = self.config.gamma
        self.root = self.target_cache.length
        done = self.draft_cache.length                    # positions the drafter has with true features
        drafts, q_rows, conf = [], [], []
        with torch.no_grad():
            # features[:, s] holds f_{s-1}: catch up positions done..root with the target's features
            out = self._draft(self.tokens[done:self.root + 1], self.features[:, done:self.root + 1], done)[:, -1:]
            for i in range(gamma):
                q = self.sampling.probs(self.feature_drafter.logits(out, self.target)[0, -1])
                token = int(q.argmax()) if self.sampling.greedy else rules.draft_candidates(q.tolist(), 1, self.rng)[0]
                drafts.append(token)
                q_rows.append(q)
                conf.append(float(q.max()))
                if i + 1 < gamma:
                    out = self._draft([token], out, self.root + 1 + i)
        q_rows.append(torch.zeros_like(q_rows[0]))
        return Proposal(rules.TokenTree.chain(drafts), torch.stack(q_rows), conf, draft_forwards=gamma)

    def verify(self, proposal: Proposal) -> tuple[rules.Verdict, int]:
        """The target's chain forward, keeping its last hidden states as the next features."""
        tokens = [self.tokens[-1], *proposal.tree.tokens[1:]]
        with self.timer.region("verify"), torch.no_grad():
            out = self.target(self._ids(tokens), self.target_cache)
        self.verified = out.hidden
        return self.decide(proposal.tree, out.logits[0], proposal), proposal.tree.size

    def commit(self, proposal: Proposal, verdict: rules.Verdict) -> None:
        kept = self.root + 1 + verdict.n_accepted
        self.target_cache.crop(kept)
        self.draft_cache.crop(self.root + 1)              # drop entries made from drafted features
        self.features = torch.cat([self.features, self.verified[:, : verdict.n_accepted + 1]], dim=1)
        self.tokens.extend(verdict.tokens)
