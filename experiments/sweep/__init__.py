"""The sweep, the main job (`python -m experiments.sweep`, `cli`): every method's space scored on
every Profile (`run`, `scoring`, `estimate`, `executor`), the answer per deployment served by the
simulator (`deployments`), written as tables, plots and a report (`report`, `plots`) and as the
engines take it (`export`)."""
