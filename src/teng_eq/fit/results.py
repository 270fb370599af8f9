"""What solves and steps report, at the bottom of the numerics (lineax's ``_solution.py``):
:class:`RESULTS`, what a least-squares solve or an update ran into, and its per-step counts
(:data:`EVENTS`, :func:`event_counts`); :class:`StepRecord`, what one step of any method
reports, made on the device."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int


class RESULTS(eqx.Enumeration):
    successful = ""
    cholesky_fallback = "a Cholesky factorisation broke down and the solve was redone by QR"
    nonfinite_update = "an update was not finite and was replaced by no update"


#: Solver events a step counts (metric name → result); a run logs their sums as ``<name>_total``.
EVENTS: dict[str, RESULTS] = {"fallbacks": RESULTS.cholesky_fallback, "zero_steps": RESULTS.nonfinite_update}


def event_counts(*results: RESULTS) -> dict[str, Int[Array, ""]]:
    """One :data:`EVENTS` count per name: how many of ``results`` are that event (a
    solve may run into several: a Cholesky fallback whose QR is not finite either)."""
    zero = jnp.zeros((), jnp.int32)
    return {name: sum(((r == item).astype(jnp.int32) for r in results), zero)
            for name, item in EVENTS.items()}


class StepRecord(eqx.Module):
    """What one step reports.

    ``losses[s, i]`` is the loss of stage (or block) ``s`` before its iteration
    ``i``, and the last finite entry of a row the loss after its last iteration;
    ``inner[s, i]`` is what iteration ``i`` measured of its own subproblem (the
    method's :attr:`~teng_eq.methods.base.Method.inner_measure`: TENG's
    least-squares residual, an optimiser's gradient norm). Rows are padded
    with NaN past their end.

    ``metrics`` are logged under their names at ``step``: the method's
    (``step_loss`` always; e.g. ``holdout_loss``, ``iterations`` and the
    :data:`~teng_eq.fit.results.EVENTS`), and on the host the driver's (``rel_l2`` where measured,
    ``wall_time_s``, …). ``step`` n of a sequential method is at time ``t``
    (step 0: the start, with the error metrics only); a global-in-time method's
    steps are blocks of its optimisation (``t`` is None). ``of``: the run's steps (None:
    not known yet, under ``dt: auto``).
    """

    losses: Float[Array, "stages rows"]
    inner: Float[Array, "stages rows"]
    metrics: dict[str, Array]
    step: int = eqx.field(static=True, default=0)
    of: int | None = eqx.field(static=True, default=None)
    t: float | None = eqx.field(static=True, default=None)

    def table(self) -> np.ndarray:
        """The loss table as rows ``(stage, iteration, loss, inner)``, padding dropped."""
        losses, inner = np.asarray(self.losses), np.asarray(self.inner)
        stage, it = np.nonzero(~np.isnan(losses))
        return np.column_stack([stage, it, losses[stage, it], inner[stage, it]]).astype(np.float64)

    @classmethod
    def from_table(cls, table: np.ndarray, metrics: dict[str, float], **where) -> StepRecord:
        """The record whose :meth:`table` is ``table`` (a step replayed from a checkpoint)."""
        stage, it = table[:, 0].astype(int), table[:, 1].astype(int)
        shape = (stage.max() + 1, it.max() + 1) if len(table) else (0, 0)
        losses, inner = np.full(shape, np.nan), np.full(shape, np.nan)
        losses[stage, it], inner[stage, it] = table[:, 2], table[:, 3]
        return cls(losses=losses, inner=inner, metrics=metrics, **where)


def stack_rows(rows: list[Array], width: int) -> Float[Array, "stages width"]:
    """1-D arrays as the rows of one array, NaN-padded to ``width`` (a record's loss table)."""
    return jnp.stack([jnp.concatenate([r, jnp.full(width - r.shape[0], jnp.nan, r.dtype)]) for r in rows])
