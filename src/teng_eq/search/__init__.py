"""The error–runtime frontier: a multi-objective search over a sweep's axes
(docs/frontier.md).

* :mod:`~teng_eq.search.space`: a search space in Hydra's override grammar
  (``choice``, ``range``, ``interval``, ``tag(log, …)``) as Optuna distributions,
  and the sweeper's keys checked;
* :mod:`~teng_eq.search.study`: the Optuna study (SQLite beside the MLflow store,
  continued by a second invocation), its sampler, front and target;
* :mod:`~teng_eq.search.sweeper`: the Hydra sweeper (``hydra/sweeper=frontier``)
  that launches each trial as an ordinary job and tells the study from its MLflow run.

Hydra importers (the preflight validates a space with :mod:`~teng_eq.search.space`);
never JAX: the sweeper runs in the launching process.
"""
