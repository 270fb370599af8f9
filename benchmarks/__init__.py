"""The timings of ``pipeline/bench.py``: what it times (:mod:`.steps`) and how (:mod:`.timing`)."""
