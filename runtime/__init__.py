"""The model runtime: our Llama forward (`llama`), model loading (`models`), the decoding engine
(`engine`) and the drafters that read the target's internals (`drafters`)."""
