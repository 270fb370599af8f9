"""What the tests share, in one place (as lightning-hydra-template's ``tests/helpers``).

Imported as ``helpers.<module>``: tests/ is on the path of the tests (pytest puts the
folder of tests/conftest.py there) and of the jobs they start (:func:`helpers.processes.job_env`).

* :mod:`helpers.configs`: conf/ as Hydra composes it, and the small problems the tests run.
* :mod:`helpers.processes`: pipeline/ scripts in subprocesses, as a person runs them.
* :mod:`helpers.mlflow_store`: a store read back, and a real ``mlflow server``.
* :mod:`helpers.numerics`: relative errors and convergence orders.
* :mod:`helpers.bands`: the bands the run's error estimate must lie in relative to its
  true error, each once with its reason and measurement (:class:`helpers.bands.Band`).
* :mod:`helpers.stops`: a run stopped in-process after a step it reported.
* :mod:`helpers.fake_methods`: cheap methods for the driver, ``method.impl=helpers.fake_methods:…``.
* :mod:`helpers.linear_model`: a network linear in θ, on which TENG's projections are exact.
* :mod:`helpers.split_heat`: heat with part of its Laplacian declared stiff (the IMEX orders).
* :mod:`helpers.user_files`: a user's own PDE and yaml, written into a test's folder.
* :mod:`helpers.figures`: the data drawn in a figure's panels.
* ``helpers/faulty_sweep.py``: pipeline/sweep.py on a disk that fills up at a chosen write.
"""
