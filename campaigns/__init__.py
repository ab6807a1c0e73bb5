"""Recording campaigns: the SmolLM2 CPU data (`smollm2`, `smollm2_report`; `python -m
experiments.smollm2_cpu`), the GPU campaign (`gpu`; `python -m experiments.gpu_campaign`) and the
interleaved measurement both fidelity and calibration use (`measure`)."""
