"""Settings as validated, frozen dataclasses, and the classes a config names by ``impl``
(:mod:`.options`); no JAX."""
