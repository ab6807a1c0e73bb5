"""Traces proper: the trace schema (`schema`), recording (`record`), exact greedy replay
(`replay`, `replayed`, `check_replay`), prompt sets (`prompts`) and latency micro-benchmarks
(`timing`). Models and the engine live in `runtime`, training in `training`, the rules and the
verifier in `verification`."""
