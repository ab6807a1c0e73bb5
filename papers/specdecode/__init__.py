"""The study "Speculative Decoding: Performance or Illusion?" (SpecDecode-Bench): its vLLM runs on one
H100 at batch 1-128 over four request streams, predicted from the acceptance spans it published
(replayed exactly, `run`), priced by our calibration (`calibrate.vllm`), by the study's own step-time
fit and by its own simulator re-implemented (`peer`), with the deployment answer (`deploy`) and the
report (`report`); the command is `python -m experiments.vllm_h100`."""
