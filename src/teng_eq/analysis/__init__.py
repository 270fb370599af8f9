"""Comparisons across runs (:mod:`.compare`), their figures (:mod:`.plots`) and what
``pipeline/analyze.py`` writes (:mod:`.report`); no JAX."""
