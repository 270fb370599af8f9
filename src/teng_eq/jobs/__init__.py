"""A job of ``pipeline/sweep.py``: every job checked first (:mod:`.preflight`), then run in its
MLflow run (:mod:`.job`) with a progress display and its artifacts."""
