"""What ``pipeline/bench.py --vs-authors`` reads of the authors' code: their reference data
(centred Fourier coefficients) as a field on their grid, their log's step times and errors,
and a checkout that is not theirs refused in one line. The authors' code itself is not in
this repository (CC BY-NC-SA): the comparison is a benchmark, run by hand."""

from decimal import Decimal

import numpy as np
import pytest

from benchmarks import authors


def test_reference_coefficients_give_the_trigonometric_polynomial_on_the_authors_grid():
    # u = 0.7 + cos x + 0.5 sin 2y + 0.25 cos(x + 3y), coefficients of e^{i(k1 x + k2 y)} in fftshift order.
    size, half = 9, 4
    c = np.zeros((size, size), complex)

    def put(k1, k2, value):
        c[k1 + half, k2 + half] += value

    put(0, 0, 0.7)
    put(1, 0, 0.5), put(-1, 0, 0.5)
    put(0, 2, -0.25j), put(0, -2, 0.25j)
    put(1, 3, 0.125), put(-1, -3, 0.125)
    m = 32
    x = authors.eval_points(m)
    exact = 0.7 + np.cos(x[:, 0]) + 0.5 * np.sin(2 * x[:, 1]) + 0.25 * np.cos(x[:, 0] + 3 * x[:, 1])
    field = authors.reference_on_grid(c, m)
    assert field.shape == (m, m)
    np.testing.assert_allclose(field.ravel(), exact, rtol=0, atol=1e-14)
    assert authors.relative_error(exact, field) < 1e-14
    with pytest.raises(ValueError, match="M odd"):
        authors.reference_on_grid(np.zeros((8, 8), complex), m)


LOG = """step=-1, T=Decimal('0'), err=(7.0e-07, 9.5e-08), loss=(0, 0), training_time=0
step=0, T=Decimal('0.005'), stage=0, iter=0, loss=1e-12, info=(1e-15,)
step=0, T=Decimal('0.005'), err=(6.5e-07, 8.8e-08), loss=[5.3e-15, 6.5e-16], training_time=9.5
step=1, T=Decimal('0.010'), stage=1, loss=1.7e-15
step=1, T=Decimal('0.010'), err=(6.3e-07, 8.5e-08), loss=[8.6e-16, 1.7e-15], training_time=11.5
step=2, T=Decimal('0.015'), err=(6.1e-07, 8.25e-08), loss=[8.6e-16, 1.7e-15], training_time=14.5
Total time: 24.63 seconds
"""


def test_the_authors_log_gives_each_steps_time_and_the_last_error():
    per_step, error, t = authors.parse_authors_log(LOG)
    np.testing.assert_allclose(per_step, [9.5, 2.0, 3.0])
    assert error == 8.25e-08 and t == Decimal("0.015")
    # The first step (compiling) counts at the median of the others: 2.5 + 2 + 3.
    assert authors.stepping_seconds(per_step) == pytest.approx(7.5)
    with pytest.raises(ValueError, match="no step line"):
        authors.parse_authors_log("Total time: 1 s\n")


def test_a_folder_that_is_not_the_authors_checkout_is_refused_in_one_line(tmp_path):
    (tmp_path / "teng.py").write_text("")
    with pytest.raises(SystemExit, match=r"not a checkout of github.com/pde-sim/teng \(no init_model_state"):
        authors.check_checkout(tmp_path, tmp_path / "python")


def test_every_case_runs_a_whole_number_of_the_authors_steps():
    for case in authors.CASES.values():
        assert case.steps * Decimal(case.dt) == Decimal(case.horizon)
        assert case.equation in authors.REFERENCE_FOLDER
