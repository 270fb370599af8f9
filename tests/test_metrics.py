import numpy as np

from teng_eq.run.metrics import global_relative_l2, squared_norms


def test_squared_norms_give_the_relative_error():
    ref = np.array([3.0, 4.0])
    err, norm = squared_norms(ref * 1.01, ref)
    assert abs(np.sqrt(err / norm) - 0.01) < 1e-15 and squared_norms(ref, ref)[0] == 0.0
    # Per-point weights: Σ w (û − u)², Σ w u².
    assert squared_norms(ref + 1, ref, np.array([2.0, 0.5])) == (2.5, 26.0)


def test_global_is_trapezoid_in_time():
    times = np.array([0.0, 1.0, 3.0])
    err_sq, ref_sq = np.array([0.0, 1.0, 4.0]), np.array([1.0, 1.0, 1.0])
    # ∫err² dt = (0+1)/2·1 + (1+4)/2·2 = 5.5; ∫ref² dt = 3.
    assert abs(global_relative_l2(err_sq, ref_sq, times) - np.sqrt(5.5 / 3)) < 1e-15


def test_constant_relative_error_gives_same_global():
    rng = np.random.default_rng(0)
    times = np.linspace(0, 1, 11)
    sq = [squared_norms(1.001 * u, u) for u in rng.normal(size=(11, 50))]
    e, r = np.array(sq).T
    assert abs(global_relative_l2(e, r, times) - 1e-3) < 1e-12
