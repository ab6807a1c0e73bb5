"""vLLM on one H100 at batch 1-128 for SpecDecode-Bench's four request streams: speedups of EAGLE-3 and
n-gram speculation predicted from the acceptance the study published (its spans, replayed exactly),
priced by our calibration, by the study's own step-time fit and by its own simulator (the peer), and
the deployment answer (`python -m experiments.vllm_h100`, `experiments.vllm_h100.cli`)."""
