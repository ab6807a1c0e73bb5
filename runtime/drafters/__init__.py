"""Drafters that read the target's internals: GLIDE (target KV cache), Kangaroo (early exit
adapter) and CORAL/EAGLE (target features, LM-head router). Plain nn.Modules, trainable, saved
as safetensors with their configuration (`runtime.drafters.io`)."""

