"""TENG's time steps: Runge–Kutta tableaux (:mod:`.tableau`), the explicit (:mod:`.explicit`) and
implicit (:mod:`.implicit`) steps on their shared pieces (:mod:`.base`)."""
