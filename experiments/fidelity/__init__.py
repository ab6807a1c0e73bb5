"""Predictions judged against measurements they were not fitted on (`python -m experiments.fidelity`,
`cli`): predictions written first (`run`), then measured (`experiments.campaigns.measure`) and
compared (`report`)."""
