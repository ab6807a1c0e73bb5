"""CORAL / EAGLE-style feature drafter with CORAL's LM-head router.

At position s the drafter reads the token t_s and the feature of position s-1, where a feature
is the target's last-layer hidden state (before its final norm, `ForwardOutput.hidden`):
    f^d_s = Layer(fc([embed(t_s); f_{s-1}])),   logits_s = head(f^d_s)  (predicts t_{s+1}).
Embeddings, final norm and LM head are the target's (shared, frozen); the drafter owns `fc`,
one Llama decoder layer with its own one-layer KV cache, and optionally an `LMHeadRouter`.
During drafting f_{s-1} is the drafter's own previous output feature; after verification the
accepted positions are re-run with the target's true features (EAGLE), which is also what
multi-step (HASS) training with CORAL's alignment loss trains for.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from common.errors import InputError
from runtime.cache import KVCache, make_cache
from runtime.drafters.common import (UNTRAINED, check_untrained, materialise, positions, resolve_drafter,
                                     start_keeping_prefill)
from runtime.drafters.router import LMHeadRouter
from runtime.engine.base import Decoder, Proposal
from runtime.graph import static_forward
from runtime.linear import Linear
from runtime.llama import DecoderLayer, Llama, LlamaConfig
from verification import rules


@dataclass
class CoralConfig:
    hidden_size: int
    vocab_size: int
    router_groups: int = 0   # N (0: no router, the plain head)
    router_top_n: int = 0    # top-n groups computed

    @classmethod
    def for_target(cls, target: LlamaConfig, router_groups: int = 0, router_top_n: int = 0) -> "CoralConfig":
        if router_groups:
            if not 1 <= router_groups <= target.vocab_size:
                raise InputError(f"router groups must lie in 1..{target.vocab_size}, got {router_groups}")
            if not 1 <= router_top_n <= router_groups:
                raise InputError(f"router top-n must lie in 1..{router_groups} (the group count), got {router_top_n}")
        return cls(target.hidden_size, target.vocab_size, router_groups, router_top_n)


class FeatureDrafter(nn.Module):
    """fc + one decoder layer (+ router); the target gives embeddings, RoPE, norm and LM head."""

    kind = "coral"

    def __init__(self, config: CoralConfig, target_config: LlamaConfig):
        super().__init__()
        self.config = config
        self.layer_config = LlamaConfig(**{**target_config.__dict__, "num_layers": 1})
        self.fc = Linear(2 * config.hidden_size, config.hidden_size, bias=True)
        self.layer = DecoderLayer(self.layer_config)
        self.router = (LMHeadRouter(config.hidden_size, config.vocab_size, config.router_groups, config.router_top_n)
                       if config.router_groups else None)

    def config_dict(self) -> dict:
        return asdict(self.config)

    @classmethod
    def from_config_dict(cls, config: dict, target: Llama) -> "FeatureDrafter":
        c = CoralConfig(**config)
        if (c.hidden_size, c.vocab_size) != (target.config.hidden_size, target.config.vocab_size):
            raise InputError("CORAL drafter was built for a target of another shape (width or vocabulary)")
        return cls(c, target.config)

    @classmethod
    def for_target(cls, target: Llama, *, router_groups: int = 0, router_top_n: int = 0,
                   seed: int = 0, std: float = 0.02) -> "FeatureDrafter":
        """An untrained drafter for `target` (seeded weights), with or without a router."""
        config = CoralConfig.for_target(target.config, router_groups, router_top_n)
        return materialise(lambda: cls(config, target.config), target, seed, std)

    def with_router(self, router_groups: int, router_top_n: int, *, seed: int = 0, std: float = 0.02) -> "FeatureDrafter":
        """The same drafter (shared fc/layer) with a fresh router; CORAL trains the router second."""
        config = CoralConfig(self.config.hidden_size, self.config.vocab_size, router_groups, router_top_n)
        with torch.device("meta"):
            clone = FeatureDrafter(CoralConfig(config.hidden_size, config.vocab_size), self.layer_config)
        clone.config, clone.fc, clone.layer = config, self.fc, self.layer
        if router_groups:
            w = self.fc.weight
            router = LMHeadRouter(config.hidden_size, config.vocab_size, router_groups, router_top_n)
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p in router.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) * std)
            clone.router = router.to(device=w.device, dtype=w.dtype)
        return clone.eval()

    @classmethod
    def timed_draft(cls, entry: dict, bench):
        """One decode-step draft forward (the layer and the head, routed when the entry has a router)
        at a filled context, for `traces.drafter_timing`: ctx -> (run, reset)."""
        one = bench.build(1)
        drafter = cls.for_target(one, seed=bench.seed)
        router = entry.get("router")
        if router:
            drafter = drafter.with_router(int(router["groups"]), int(router["top_n"]), seed=bench.seed)
        ids = torch.zeros(1, 1, dtype=torch.long, device=one.device)
        feature = torch.zeros(1, 1, one.config.hidden_size, dtype=one.dtype, device=one.device)

        def at(ctx: int):
            pos = torch.tensor([ctx], device=one.device)
            cache = bench.fill(drafter, ctx, config=drafter.layer_config)
            return lambda: drafter.logits(drafter(ids, feature, one, cache, pos), one), lambda: cache.crop(ctx)
        return at

    def new_cache(self, batch: int = 1, capacity: int = 256, *, mode: str = "eager", runner=None) -> KVCache:
        w = self.fc.weight
        return make_cache(self.layer_config, batch, capacity, dtype=w.dtype, device=w.device, mode=mode,
                          runner=runner)

    def forward(self, input_ids: torch.Tensor, prev_features: torch.Tensor, target: Llama,
                cache: KVCache | None = None, position_ids: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        """Output features [batch, q, hidden] for tokens [batch, q] and the features one position earlier."""
        b, q = input_ids.shape
        if cache is not None and cache.static:
            def run(positions, mask, slots, input_ids, prev_features):
                cache.slots = slots
                return (self._layer(input_ids, prev_features, target, positions, mask, cache),)

            return static_forward(cache, ("coral", id(self), id(target)), run, q, layers=range(1), batch=b,
                                  rows={"input_ids": input_ids, "prev_features": prev_features}, mask=mask,
                                  position_ids=position_ids)[0]
        past = cache.length if cache is not None else 0
        position_ids = positions(position_ids, past, b, q, input_ids.device)
        attn_mask = Llama._attention_mask(mask, past, q, input_ids.device)
        return self._layer(input_ids, prev_features, target, position_ids, attn_mask, cache)

    def _layer(self, input_ids, prev_features, target: Llama, position_ids, attn_mask, cache) -> torch.Tensor:
        cos, sin = target.rope(position_ids)
        x = self.fc(torch.cat([target.embed_tokens(input_ids), prev_features], dim=-1))
        return self.layer(x, cos, sin, attn_mask, cache, 0)

    def logits(self, features: torch.Tensor, target: Llama) -> torch.Tensor:
        """Draft logits [..., V]: the target's norm + LM head, only over the routed groups if a router is set."""
        normed = target.norm(features)
        if self.router is None:
            return target.lm_head(normed)
        return self.router.routed_logits(normed, target.lm_head.weight)


DRAFTER = FeatureDrafter      # the class `runtime.drafters.io` loads for its kind


# ------------------------------------------------------------------------------- the decoder

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
