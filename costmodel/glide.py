"""GLIDE's drafter in parameters: what the cost model needs of the drafter that cross-attends to the
target's KV cache (its acceptance and CAPE's expansion are `costmodel.cape` and the chain's
`costmodel.leviathan`)."""
from __future__ import annotations

from costmodel.params import Arch, attention_params


def drafter_arch(t: Arch, base: dict, **options) -> dict:
    """`costmodel.params.drafter_arch("glide", ...)`: one decoder layer plus a cross-attention block
    reading one layer of the target's KV cache, sharing the target's LM head."""
    return dict(base, n_layers=1, extra_params=attention_params(t) + t.hidden, cross_kv_layers=1,
                source="GLIDE drafter: 1 decoder layer + cross-attention on the target's KV cache, target LM head")
