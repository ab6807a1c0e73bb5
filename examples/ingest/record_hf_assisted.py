"""Record transformers' assisted generation into a StepTrace: `python examples/ingest/record_hf_assisted.py`.

A tiny random Llama target (2 layers, the second one weak) and an assistant made of its first
layer (embeddings, norm and head copied), so that the two often agree; seeded, CPU, seconds.
Writes examples/ingest/hf_assisted_steps.parquet; `python -m calibrate.ingest hf-assisted` reads it.
Every step drafts DRAFT tokens (fewer only where the length limit cuts it): transformers reads the
draft length, its schedule and the confidence threshold from the assistant's generation_config,
so they are set there (`methods.engines.hf_chain`), not passed to generate(), where they would be
ignored for the defaults (20 tokens, a 0.4 threshold that ends most drafts after one or two).
With real models, wrap your own `model.generate(..., assistant_model=...)` the same way.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging

from calibrate.ingest.hf_assisted import AssistedRecorder
from methods.engines import hf_chain

DRAFT = 4


def tiny_pair(seed: int = 0):
    torch.manual_seed(seed)
    shape = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                 num_key_value_heads=4, max_position_embeddings=256, initializer_range=0.4, pad_token_id=0, eos_token_id=None)
    target = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, **shape)).eval()
    assistant = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, **shape)).eval()
    with torch.no_grad():   # a weak second layer: the target mostly agrees with its first layer
        for proj in (target.model.layers[1].self_attn.o_proj, target.model.layers[1].mlp.down_proj):
            proj.weight.mul_(0.15)
    state = {k: v for k, v in target.state_dict().items() if not k.startswith("model.layers.1.")}
    assistant.load_state_dict(state)
    target.config._name_or_path, assistant.config._name_or_path = "tiny-llama-2l", "tiny-llama-1l"
    return target, assistant


def record(out: Path, prompts: int = 3, new_tokens: int = 24, seed: int = 0) -> Path:
    logging.set_verbosity_error()   # generate's notes on the assistant's generation config
    target, assistant = tiny_pair(seed)
    for name, value in hf_chain(DRAFT).items():
        setattr(assistant.generation_config, name, value)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad(), AssistedRecorder(target) as recorder:
        for p in range(prompts):
            recorder.prompt_id = f"random/{p}"
            ids = torch.randint(1, 96, (1, 8), generator=generator)
            target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant,
                            max_new_tokens=new_tokens, do_sample=False)
    return recorder.write(out, dataset="random", hardware="CPU")


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("hf_assisted_steps.parquet")
    print(f"wrote {record(path)}")
