"""The error–runtime frontier: a multi-objective search over a sweep's axes
(docs/frontier.md): its space as Optuna distributions, the Optuna study, the Hydra
sweeper that launches each trial as an ordinary job. Hydra importers; never JAX: the
sweeper runs in the launching process.
"""
