"""Fitting a network to values: least squares (:mod:`.lstsq`), one TENG stage of projected least
squares (:mod:`.stage`), jitted chunks of iterations (:mod:`.iterate`) and θ₀ (:mod:`.theta0`)."""
