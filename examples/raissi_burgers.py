"""Raissi's Burgers benchmark, measured as its authors measure it: the relative L² error
‖Û − U‖_F / ‖U‖_F over their space–time grid, 256 equispaced points of [−1, 1] at the 100
times 0, 0.01, …, 0.99 (Raissi, Perdikaris & Karniadakis 2019: their PINN, 6.7e-4), of one
run of the preset ``burgers_raissi`` (zero Dirichlet data at x = ±1 as boundary rows), against
the Cole–Hopf integral and against the periodic line's own reference (pseudo-spectral ETDRK4
on [0, 2) from u₀ moved by 1: the solution is odd and 2-periodic, so the two problems are one).

    python examples/raissi_burgers.py method=teng_rk4          # the preset's size: grid 1024, Δt 10⁻³
    python examples/raissi_burgers.py method=teng_rk4 grid=256 t_final=0.2   # smaller, to try

Prints the two space–time errors, the run's own global error, ``runtime_s`` and θ₀'s time.
"""

import sys

import numpy as np

from teng_eq.api import run
from teng_eq.equations.line import BurgersLine
from teng_eq.network.space import ParamSpace
from teng_eq.reference import reference_solution
from teng_eq.reference.cole_hopf import cole_hopf

NU = 0.01 / np.pi
X = np.linspace(-1.0, 1.0, 256)


def sample_times(t_final: float) -> np.ndarray:
    """Raissi's 100 times, those up to the run's horizon."""
    times = np.round(np.arange(100) * 0.01, 12)
    return times[times <= t_final + 1e-12]


def record(times):
    """A step callback keeping the method's state at each of ``times`` the steps land on (fixed Δt)."""
    kept = {}

    def step(rec, state):
        for t in times:
            if abs(state.t - t) < 1e-9:
                kept[float(t)] = state.method
    return kept, step


def periodic_reference(times: np.ndarray, n: int = 4096) -> np.ndarray:
    """u at (times, X) from the periodic line's ETDRK4 on [0, 2) (x moved by 1), by its Fourier
    series at the shifted points."""
    line = BurgersLine(name="burgers_1d", nu=NU, lengths=(2.0,), initial_condition="raissi")
    solution = reference_solution(line, times, n=n)
    k = np.fft.fftfreq(n, 1.0 / n) * np.pi  # 2π/L · j with L = 2
    out = np.empty((len(times), X.size))
    for i in range(len(times)):
        coefficients = np.fft.fft(solution.values(i, n)) / n
        out[i] = np.real(np.exp(1j * np.outer(X + 1.0, k)) @ coefficients)
    return out


def main(overrides):
    overrides = list(overrides)
    t_final = next((float(o.split("=")[1]) for o in overrides if o.startswith("t_final=")), 1.0)
    times = sample_times(t_final)
    kept, step = record(times)
    result = run("burgers_raissi", *overrides, callbacks=[step])
    space = ParamSpace(result.network)
    points = X[:, None]
    # a TENG state is θ, or θ with the rate it extrapolates by
    u_hat = np.stack([np.asarray(space.apply(getattr(kept[float(t)], "theta", kept[float(t)]), points))
                      for t in times])
    exact = np.stack([cole_hopf(X, float(t), NU) for t in times])
    line = periodic_reference(times)
    frob = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    print(f"space–time relative L² on Raissi's grid ({X.size} × {len(times)}): "
          f"{frob(u_hat, exact):.3e} against Cole–Hopf, {frob(u_hat, line):.3e} against the periodic "
          f"line's ETDRK4 (the two references differ by {frob(line, exact):.1e})")
    print(f"global_rel_l2 {result.global_rel_l2:.3e}, final rel_l2 {result.rel_l2[-1]:.3e}, "
          f"runtime_s {result.runtime_s:.1f}, θ₀ fit {result.fit_report.seconds:.1f} s")
    return frob(u_hat, exact), frob(u_hat, line), result


if __name__ == "__main__":
    main(sys.argv[1:])
