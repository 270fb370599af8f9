"""The on-disk cache of θ₀ fits, references and checkpoints: folders, locks, self-checking
entries and the keys they are written for (:mod:`.files`); no JAX."""
