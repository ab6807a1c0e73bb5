"""A Profile of one engine deployment, priced from the architecture, the hardware's physics and the
engine's own published costs: Llama-3.1-8B-Instruct with EAGLE-3 and vLLM's n-gram proposer, served
by vLLM 0.10.1 with CUDA graphs on one H100 SXM (`python -m calibrate.vllm`).

Where each number comes from is `calibrate.vllm.facts` (published engine facts, each with its
source), `calibrate.vllm.grid` (the project's own H100 forwards: the efficiencies of the roofline),
`calibrate.vllm.engine` (the engine's per-step terms fitted on published vLLM measurements) and
`calibrate.vllm.study_fit` (the study's own step-time fit, a second calibration reported beside the
first); the study's request streams (spans, lengths, vLLM's n-gram proposals) are
`calibrate.vllm.streams`, its acceptance entries `calibrate.vllm.acceptance`, the Profile
`calibrate.vllm.build`.
"""
