"""Checks every network kind's tests share."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.network.space import ParamSpace


def rows(dim: int, outputs: int, n: int = 13) -> jnp.ndarray:
    """``n`` random points of [0, 2π)^dim, with a system's component index appended (``(x, c)``)."""
    x = jax.random.uniform(jax.random.PRNGKey(2), (n, dim), maxval=2 * math.pi)
    if outputs > 1:
        x = jnp.concatenate([x, (jnp.arange(n) % outputs)[:, None].astype(x.dtype)], axis=1)
    return x


def assert_factored_jacobian(net, x) -> None:
    """``net``'s ``Gᵀ[gcol] ∘ Hᵀ[hcol]`` is ``jacfwd`` of its values at the rows ``x``, column by
    column in θ's order, with the factor rows and columns it declares, and its ``u`` its values.
    The tolerance: 64 ulps of the largest entry (measured ≤ 4.5e-16 absolute on entries up to
    ~10: the same products in another order)."""
    space = ParamSpace(net)
    theta = space.flatten(net)
    jac = jax.jit(jax.jacfwd(lambda t: space.apply(t, x)))(theta)
    u, Gt, Ht = eqx.filter_jit(lambda n, p: n.jacobian_factors_t(p))(net, x)
    gcol, hcol = net.factor_columns()
    assert (Gt.shape[0], Ht.shape[0]) == net.factor_rows()
    assert gcol.shape == hcol.shape == (space.size,)
    scale = float(jnp.max(jnp.abs(jac)))
    np.testing.assert_allclose(np.asarray((Gt[gcol] * Ht[hcol]).T), np.asarray(jac), rtol=0,
                               atol=64 * np.finfo(float).eps * scale)
    np.testing.assert_allclose(np.asarray(u), np.asarray(space.apply(theta, x)), rtol=0, atol=1e-14)


def reloaded_network(result, uri: str):
    """The network of the one job logged to ``uri``, rebuilt from its θ artifact and config
    (:func:`teng_eq.api.load_run`), after checking that its field on the evaluation grid gives
    the logged ``final_rel_l2`` against the reference and equals ``result``'s own field
    (MLflow is imported here, not with the module)."""
    from helpers.mlflow_store import job_runs
    from teng_eq.api import load_run
    from teng_eq.run.metrics import squared_norms

    (job,) = job_runs(uri)
    field = load_run(job.info.run_id, tracking_uri=uri)
    points, values = field.on_grid()
    cfg = field.config
    reference = cfg.equation.reference_anytime(cfg.t_final).values_at(cfg.t_final, cfg.eval_grid)
    err_sq, ref_sq = squared_norms(values, reference, cfg.equation.evaluation(cfg.eval_grid).weights)
    np.testing.assert_allclose(np.sqrt(err_sq / ref_sq), job.data.metrics["final_rel_l2"], rtol=1e-10, atol=0)
    np.testing.assert_array_equal(field(points), result.field(points))
    return field.network
