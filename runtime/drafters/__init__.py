"""Drafters that read the target's internals (its KV cache, its early or last-layer features, its
LM head), one module per kind with its engine decoder. Plain nn.Modules, trainable, saved as
safetensors with their configuration (`runtime.drafters.io`)."""

