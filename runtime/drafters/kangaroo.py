"""Kangaroo: self-drafting through the target's first l layers plus a small adapter (Kangaroo §3.1).

The self-draft model is A o M_b[:l]: the target's shallow sub-network (its own weights and its
own KV cache for layers 0..l-1) followed by the adapter A, which is one multi-head attention
block between two RMSNorms, with the target's LM head shared:
    h = f + Attn(norm_in(f));   logits = lm_head(norm_out(h)).
The adapter keeps a one-layer KV cache of its own. Drafting stops after the first drafted token
whose top-1 probability is <= eta (Kangaroo Eq. 4); the early features of all drafted tokens are
then passed through the remaining layers l..N-1 of the target in one forward to verify them.
`Kangaroo` is the engine decoder of the method `kangaroo` (named by methods/kangaroo.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from runtime.drafters.common import materialise, positions
from runtime.drafters.common import UNTRAINED, check_untrained, resolve_drafter, start_keeping_prefill
from common.errors import InputError
from runtime.engine.base import Decoder, Proposal
from runtime.cache import make_cache
from runtime.graph import static_forward
from runtime.cache import KVCache
from runtime.llama import Attention, Llama, LlamaConfig, RMSNorm
from verification import rules


@dataclass
class KangarooConfig:
    exit_layer: int          # l: the adapter reads the output of target layers 0..l-1
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    target_layers: int
    rms_eps: float = 1e-5

    @classmethod
    def for_target(cls, target: LlamaConfig, exit_layer: int) -> "KangarooConfig":
        if not 1 <= exit_layer < target.num_layers:
            raise InputError(f"kangaroo exit layer must lie in 1..{target.num_layers - 1}, got {exit_layer}")
        return cls(exit_layer=exit_layer, hidden_size=target.hidden_size, num_heads=target.num_heads,
                   num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
                   target_layers=target.num_layers, rms_eps=target.rms_eps)

    def attention_config(self, target: LlamaConfig) -> LlamaConfig:
        """A one-layer LlamaConfig for the adapter's attention and cache (the target's RoPE)."""
        return LlamaConfig(**{**target.__dict__, "num_layers": 1, "num_heads": self.num_heads,
                              "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim})


class KangarooAdapter(nn.Module):
    """The adapter A; the target (shallow layers, LM head, RoPE) is passed to each call."""

    kind = "kangaroo"

    def __init__(self, config: KangarooConfig, target_config: LlamaConfig):
        super().__init__()
        self.config = config
        self.attn_config = config.attention_config(target_config)
        self.norm_in = RMSNorm(config.hidden_size, config.rms_eps)
        self.attn = Attention(self.attn_config)
        self.norm_out = RMSNorm(config.hidden_size, config.rms_eps)

    @property
    def exit_layer(self) -> int:
        return self.config.exit_layer

    def config_dict(self) -> dict:
        return asdict(self.config)

    @classmethod
    def from_config_dict(cls, config: dict, target: Llama) -> "KangarooAdapter":
        c = KangarooConfig(**config)
        if (c.hidden_size, c.target_layers) != (target.config.hidden_size, target.config.num_layers):
            raise InputError("kangaroo adapter was built for a target of another shape (width or depth)")
        return cls(c, target.config)

    @classmethod
    def for_target(cls, target: Llama, exit_layer: int, *, seed: int = 0, std: float = 0.02) -> "KangarooAdapter":
        """An untrained adapter for `target` exiting after layer `exit_layer` (seeded weights)."""
        config = KangarooConfig.for_target(target.config, exit_layer)
        return materialise(lambda: cls(config, target.config), target, seed, std)

    @classmethod
    def timed_draft(cls, entry: dict, bench):
        """One decode-step draft forward (the target's first `exit_layer` layers and the adapter) at a
        filled context, for `traces.drafter_timing`: ctx -> (run, reset)."""
        exit_layer = int(entry["exit_layer"])
        deep = bench.build(exit_layer + 1)
        adapter = cls.for_target(deep, exit_layer, seed=bench.seed)
        ids = torch.zeros(1, 1, dtype=torch.long, device=deep.device)

        def at(ctx: int):
            pos = torch.tensor([ctx], device=deep.device)
            shallow, own = bench.fill(deep, ctx), bench.fill(adapter, ctx, config=adapter.attn_config)

            def run():
                adapter(adapter.shallow(deep, ids, shallow, position_ids=pos), deep, own)

            def reset():
                shallow.crop(ctx, range(0, exit_layer))
                own.crop(ctx)
            return run, reset
        return at

    def new_cache(self, batch: int = 1, capacity: int = 256, *, dtype=None, device=None, mode: str = "eager",
                  runner=None) -> KVCache:
        """The adapter's own one-layer KV cache (of a runtime mode, `runtime.cache.make_cache`)."""
        w = self.norm_in.weight
        return make_cache(self.attn_config, batch, capacity, dtype=dtype or w.dtype, device=device or w.device,
                          mode=mode, runner=runner)

    def shallow(self, target: Llama, input_ids: torch.Tensor, cache: KVCache, **kw) -> torch.Tensor:
        """Early features: the target's layers 0..l-1 on `input_ids` (writes the target's cache there)."""
        return target(input_ids, cache, layers=range(0, self.exit_layer), logits=False, **kw).hidden

    def forward(self, features: torch.Tensor, target: Llama, cache: KVCache | None,
                position_ids: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Draft logits [batch, q, V] from early features [batch, q, hidden] (the adapter cache grows by q)."""
        b, q, _ = features.shape
        if cache is not None and cache.static:
            return self._static_forward(features, target, cache, position_ids, mask)
        past = cache.length if cache is not None else 0
        position_ids = positions(position_ids, past, b, q, features.device)
        cos, sin = target.rope(position_ids)
        attn_mask = Llama._attention_mask(mask, past, q, features.device)
        h = features + self.attn(self.norm_in(features), cos, sin, attn_mask, cache, 0)
        return target.lm_head(self.norm_out(h))

    def _static_forward(self, features, target: Llama, cache, position_ids, mask) -> torch.Tensor:
        """The same forward over a static cache, as one tensor function (`runtime.graph.static_forward`)."""
        def run(positions, mask, slots, features):
            cache.slots = slots
            cos, sin = target.rope(positions)
            h = features + self.attn(self.norm_in(features), cos, sin, mask, cache, 0)
            return (target.lm_head(self.norm_out(h)),)

        return static_forward(cache, ("kangaroo", id(self), id(target)), run, features.shape[1], layers=range(1),
                              batch=features.shape[0], rows={"features": features}, mask=mask,
                              position_ids=position_ids)[0]


DRAFTER = KangarooAdapter     # the class `runtime.drafters.io` loads for its kind


# ------------------------------------------------------------------------------- the decoder

class Kangaroo(Decoder):
    """Early-exit self-drafting (Kangaroo); the target cache's shallow layers run ahead while drafting."""

    method = "kangaroo"
    own_drafter = True
    options = dict(UNTRAINED)

    def __init__(self, target: Llama, drafter: Any = None, *, sampling=None, seed: int = 0, **config: Any):
        super().__init__(target, None, sampling=sampling, seed=seed, **config)
        layer, o = self.config.exit_layer, self.options
        self.adapter = resolve_drafter(KangarooAdapter, drafter, target, lambda: KangarooAdapter.for_target(
            target, layer, seed=o["drafter_seed"], std=o["drafter_std"]))
        if self.adapter.exit_layer != layer:
            raise InputError(f"kangaroo: the adapter exits at layer {self.adapter.exit_layer}, "
                             f"the configuration asks for {layer}")

    def check_config(self) -> None:
        layer, depth = self.config.exit_layer, self.target.config.num_layers
        if not 1 <= layer < depth:
            raise InputError(f"kangaroo: exit_layer must be an integer in 1..{depth - 1}, got {layer!r}")
        check_untrained(self)

    def drafter_logits(self, ids: list[int]) -> torch.Tensor:
        """The target's first layers, then the adapter, over the whole sequence."""
        tensor = self._ids(ids)
        with torch.no_grad():
            cache = self.target.new_cache(capacity=len(ids))
            return self.adapter(self.adapter.shallow(self.target, tensor, cache), self.target, None)[0]

    def start(self, prompt: list[int]) -> None:
        out = start_keeping_prefill(self, prompt, output_hidden_states=True)
        self.adapter_cache = self.new_cache("adapter", self.adapter, len(prompt))
        # early features (input of layer l) of the committed tokens the adapter has not seen yet
        self.unseen = None if out is None else out.hidden_states[self.config.exit_layer]

    def _shallow(self, token: int, position: int) -> torch.Tensor:
        pos = torch.tensor([position], device=self.target.device)
        return self.adapter.shallow(self.target, self._ids([token]), self.target_cache, position_ids=pos)

    def propose(self) -> Proposal:
        gamma, eta = self.config.gamma, self.config.eta
        self.root = self.target_cache.length           # position of the pending token
        with torch.no_grad():
            feature = self._shallow(self.tokens[-1], self.root)
            features = [feature]
            pending = feature if self.unseen is None else torch.cat([self.unseen, feature], dim=1)
            drafts, q_rows, conf = [], [], []
            forwards = 0
            while True:
                logits = self.adapter(pending, self.target, self.adapter_cache)[0, -1]
                forwards += 1
                q = self.sampling.probs(logits)
                token = int(q.argmax()) if self.sampling.greedy else rules.draft_candidates(q.tolist(), 1, self.rng)[0]
                drafts.append(token)
                q_rows.append(q)
                conf.append(float(q.max()))
                feature = self._shallow(token, self.root + len(drafts))
                features.append(feature)
                if len(drafts) == gamma or self.stop_confidence(len(drafts) - 1, conf[-1]) <= eta:
                    break
                pending = feature
        self.unseen = None
        self.features = torch.cat(features, dim=1)      # early features of the pending token and the drafts
        q_rows.append(torch.zeros_like(q_rows[0]))
        return Proposal(rules.TokenTree.chain(drafts), torch.stack(q_rows), conf, draft_forwards=forwards)

    def stop_confidence(self, index: int, confidence: float) -> float:
        """The confidence the stop rule reads for draft `index` (replayed mode substitutes a recorded one)."""
        return confidence

    def verify(self, proposal: Proposal) -> tuple[rules.Verdict, int]:
        """Target layers l..N-1 over the early features (the shallow layers ran while drafting)."""
        positions = torch.arange(self.root, self.root + proposal.tree.size, device=self.target.device)
        with self.timer.region("verify"), torch.no_grad():
            logits = self.target(hidden=self.features, cache=self.target_cache, position_ids=positions,
                                 layers=range(self.config.exit_layer, self.target.config.num_layers)).logits[0]
        return self.decide(proposal.tree, logits, proposal), proposal.tree.size

    def commit(self, proposal: Proposal, verdict: rules.Verdict) -> None:
        kept = self.root + 1 + verdict.n_accepted       # pending token + accepted drafts
        self.target_cache.crop(kept)
        self.adapter_cache.crop(min(kept, self.adapter_cache.length))
        lag = kept - self.adapter_cache.length           # committed early features the adapter lacks
        self.unseen = self.features[:, verdict.n_accepted + 1 - lag: verdict.n_accepted + 1] if lag else None
        self.tokens.extend(verdict.tokens)
