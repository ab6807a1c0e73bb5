"""Predictions judged against measurements they were not fitted on (`python -m experiments.fidelity`): predictions written first (`run`), then measured (`campaigns.measure`) and
compared (`report`)."""
