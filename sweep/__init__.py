"""The sweep, the main job (`python -m experiments.sweep`): every method's space scored on
every Profile (`run`, `scoring`, `estimate`, `executor`), the answer per deployment served by the
simulator (`deployments`), all ranked in one order with ties marked (`ranking`), written as tables,
plots and a report (`report`, `plots`, `markdown`) and as the engines take it (`export`)."""
