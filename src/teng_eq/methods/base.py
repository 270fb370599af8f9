"""The interface every method implements, TENG and the baselines alike.

A method is named by the ``impl`` key of its ``conf/method/*.yaml``; the other keys
are its :attr:`Method.Options` (a frozen dataclass that checks its own values): a
method receives only the settings it uses, as plain values, and the :class:`Problem`.
:func:`teng_eq.run.simulation.run_simulation` drives any :class:`Method`:

* ``cls.check(options, problem, name)`` refuses what it cannot run; then
  ``method = cls.build(options, problem, cache_dir=…, log=…)``;
* ``state = method.init()``: its whole state, a pytree of arrays (checkpointed as is);
* ``state, record = method.step(state, key, inputs)``, compiled once, called by the run
  loop (:func:`teng_eq.run.loop.advance`): a *sequential* method advances one Δt, a
  global-in-time one (``sequential = False``, a PINN) runs one block of its optimisation;
  ``inputs``: the :class:`StepInputs` its program takes; ``record``: a
  :class:`~teng_eq.fit.results.StepRecord`; a method with an embedded error estimate
  (``cls.error_order(options) > 0``) takes Δt there and reports ``local_error`` and
  ``u_l2`` (:mod:`teng_eq.run.controller`);
* ``method.defect(kind)``: the local terms of the a-posteriori error estimate
  (:class:`teng_eq.estimate.defect.Defect`), or None for a method without one;
* ``method.values(state, points, t)``: û(x, t) (a sequential state holds one t);
* ``method.network(state)``: the trained network, saved as ``params/theta.eqx``.

:class:`ThetaMethod` is the base of the methods whose state is the flat parameter
vector θ of the sequential network, started from the shared fitted θ₀ (TENG, TDVP, OBTI).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from teng_eq.domains.quadrature import Quadrature
from teng_eq.equations import Equation
from teng_eq.errors import bad
from teng_eq.fit.mesh import PointMesh, point_mesh
from teng_eq.fit.results import StepRecord
from teng_eq.fit.theta0 import FitOptions, FitReport, cached_initial_parameters, resolve_init
from teng_eq.network.imposed import Imposed
from teng_eq.network.kinds import Network, NetworkOptions, make_network, parameter_count
from teng_eq.network.space import ParamSpace


class StepInputs(eqx.Module):
    """What one step is given besides its state and key: its size ``dt``, the local error
    it may ``expected`` (TENG's ``local_error`` stopping) and its start ``t``; None where
    the step's program does not take it (:func:`teng_eq.run.loop.step_inputs` decides)."""

    dt: Float[Array, ""] | float | None = None
    expected: Float[Array, ""] | float | None = None
    t: Float[Array, ""] | float | None = None

    def given(self, dt: float, expected: float, t: float) -> StepInputs:
        """The inputs of one step: these values in the fields this template takes."""
        return StepInputs(*(v if f is not None else None
                            for f, v in ((self.dt, dt), (self.expected, expected), (self.t, t))))

    @property
    def start(self) -> Float[Array, ""] | float:
        return 0.0 if self.t is None else self.t  # an autonomous L does not read it


@dataclasses.dataclass(frozen=True)
class Problem:
    """What every method solves: ``equation`` from its initial condition at t = 0 to
    ``t_final``, reported (and, for a sequential method, advanced) in steps of
    ``dt`` (None: steps of the sizes the controller passes to ``step``); every
    random key derives from ``seed``; ``devices``: the local devices the fits' points are
    split over (1, N or ``"all"``, :mod:`teng_eq.fit.mesh`; a method that cannot is refused)."""

    equation: Equation
    dt: float | None
    t_final: float
    seed: int
    devices: int | str = 1

    @property
    def n_steps(self) -> int | None:
        """Steps of a fixed Δt; None when the controller chooses them (not known yet)."""
        return None if self.dt is None else round(self.t_final / self.dt)


class Method(eqx.Module):
    """A way to advance (or fit) a network so that it solves the PDE."""

    #: Steps are time steps (True) or blocks of a global-in-time optimisation (False).
    sequential: ClassVar[bool] = True
    #: What the last column of the loss table (``StepRecord.inner``) holds, per iteration.
    inner_measure: ClassVar[str] = "lsq"

    @dataclasses.dataclass(frozen=True)
    class Options:
        """The method's own config keys (the rest of its yaml); none by default."""

    #: Whether it runs systems (:class:`~teng_eq.equations.system.PeriodicSystem`).
    systems: ClassVar[bool] = False
    #: Whether its fits can split their points over devices (``devices`` > 1, :mod:`teng_eq.fit.mesh`).
    shards: ClassVar[bool] = False

    #: The run's method steps (time steps, or a global-in-time method's blocks); None when
    #: the controller chooses them (not known until the run ends).
    n_steps: int | None = eqx.field(static=True)

    @classmethod
    def check(cls, options, problem: Problem, name: str) -> None:
        """Checks across ``options`` and the ``problem`` (e.g. the equations the method
        supports); raise :class:`~teng_eq.errors.ConfigError` (``name``: the method's
        config name, for the message)."""

    @classmethod
    def error_order(cls, options) -> int:
        """The order in Δt of the step's embedded error estimate (``local_error``); 0: it
        has none, and cannot run under the step-size controller."""
        return 0

    @classmethod
    def error_constant(cls, options) -> float:
        """C of the embedded estimate's leading term ``C (ΔtL)^q y`` on a linear problem
        (:attr:`teng_eq.stepping.tableau.Tableau.error_constant`); what ``dt_initial: auto``
        sizes a first step by. 0: unknown."""
        return 0.0

    @classmethod
    def stability_limit(cls, options) -> float | None:
        """x of the step's stability interval [−x, 0]
        (:attr:`teng_eq.stepping.tableau.Tableau.stability_limit`): under ``dt: auto`` a
        step is at most x/ρ, ρ the fastest decay the fit's grid resolves. None: no cap."""
        return None

    @classmethod
    def amplification(cls, options, z: float) -> float | None:
        """|R(z)|, the step's growth factor of a mode whose Δtλ is ``z`` (real); None: not known."""
        return None

    @classmethod
    def stability_region(cls, options) -> Callable | None:
        """The step's stability region for complex rates, as the radius ρ of a set of them
        (:meth:`teng_eq.stepping.tableau.Tableau.equivalent_radius`); None: none known (an
        implicit step, or the real axis alone)."""
        return None

    @property
    def expects_error(self) -> bool:
        """Whether ``step`` reads ``inputs.expected`` (TENG under the ``local_error``
        stopping policy); the loop passes the last step's ``local_error`` scaled to the new Δt."""
        return False


    def defect(self, kind: str):
        """The :class:`~teng_eq.estimate.defect.Defect` of the run's error estimate of ``kind``
        (:data:`teng_eq.estimate.defect.KINDS`), or None for a method without one; it reads
        :meth:`parameters`."""
        return

    def parameters(self, state) -> PyTree:
        """The network parameters θ of a state (the state itself, unless the method
        carries more in it)."""
        return state

    @classmethod
    def memory(cls, options, problem: Problem) -> dict[str, tuple[int, str]]:
        """The method's largest arrays, ``{config key: (bytes, what)}`` with the key as
        in the method group (``method.grid``), for the resource preflight
        (:mod:`teng_eq.jobs.resources`): sizes it surely allocates, not a profile. None here."""
        return {}

    @classmethod
    def build(cls, options, problem: Problem, *, cache_dir=None, log=None) -> Method:
        """The method of ``options`` on ``problem``; ``cache_dir`` and ``log`` for what
        it prepares on disk (θ₀)."""
        raise NotImplementedError

    @classmethod
    def network_template(cls, options, problem: Problem) -> eqx.Module:
        """An untrained network of the shape :meth:`network` returns: what a saved
        ``params/theta.eqx`` is read into."""
        raise NotImplementedError

    def init(self) -> PyTree:
        raise NotImplementedError

    def step(self, state: PyTree, key: PRNGKeyArray, inputs: StepInputs) -> tuple[PyTree, StepRecord]:
        raise NotImplementedError

    def values(self, state: PyTree, points: Float[Array, "n dim"], t) -> Float[Array, " n"]:
        raise NotImplementedError

    def network(self, state: PyTree) -> eqx.Module:
        raise NotImplementedError

    def holdout_limits(self):
        """The :class:`~teng_eq.stepping.base.Holdout` whose ratios a run is flagged by, or
        None for a method without a held-out check."""
        return

    def fit_report(self) -> FitReport | None:
        """How θ₀'s fit went, for a method that starts from one."""
        return None


def require_periodic_domain(problem: Problem, name: str) -> None:
    """One-line :class:`~teng_eq.errors.ConfigError` where the equation's domain has a
    boundary: the baselines fit the PDE alone, with no boundary rows (TENG has them)."""
    if problem.equation.periods is None:
        raise bad("equation", problem.equation.name,
                  f"method {name} needs a periodic domain (it has no boundary term)")


@dataclasses.dataclass(frozen=True)
class ThetaOptions:
    """What every :class:`ThetaMethod` takes: the quadrature ``grid`` (points per
    dimension) of its steps' fits, its ``network`` and θ₀'s ``fit`` (with its own grid)."""

    grid: int
    network: NetworkOptions
    fit: FitOptions

    def validate(self, prefix: str) -> None:
        if self.grid < 8:
            raise bad(f"{prefix}.grid", self.grid, "must be an integer >= 8")


class ThetaMethod(Method):
    """A method whose state is θ, the flat parameters of the sequential network
    (:class:`~teng_eq.network.paper.TENGNet`), started from θ₀ fitted to the initial
    condition (:mod:`teng_eq.fit.theta0`, cached: every such method of a sweep
    starts from the same θ₀). Subclasses add their fields through :meth:`parts`."""

    Options: ClassVar[type] = ThetaOptions

    space: ParamSpace
    theta0: Float[Array, " params"]
    report: FitReport | None = eqx.field(static=True)

    @classmethod
    def check_subsample(cls, key: str, value: int, options: ThetaOptions, problem: Problem) -> None:
        """``value`` parameters can be drawn: ``1 <= value <=`` the network's parameter count."""
        eq = problem.equation
        n = parameter_count(options.network, eq.dim, eq.domain.embedding_periods, eq.outputs)
        if not 1 <= value <= n:
            raise bad(key, value, f"must be an integer in [1, {n}] (the parameter count)")

    @classmethod
    def step_jacobians(cls, options, problem: Problem) -> dict[str, int]:
        """``{what: columns}`` of the Jacobians a step forms on the quadrature grid (one
        row per point): the parameters it draws. None here."""
        return {}

    @classmethod
    def memory(cls, options: ThetaOptions, problem: Problem) -> dict[str, tuple[int, str]]:
        """The largest Jacobian on the quadrature grid: θ₀'s fit (value and gradient
        rows: d + 1 per point) or a step's (:meth:`step_jacobians`), float64."""
        eq = problem.equation
        rows = eq.point_count(options.grid)
        n = parameter_count(options.network, eq.dim, eq.domain.embedding_periods, eq.outputs)
        shapes = {"θ₀'s fit (value+gradient)": (rows * (eq.dim + 1), min(options.fit.stage1_subsample, n)),
                  "θ₀'s fit (value)": (rows, min(options.fit.stage2_subsample, n)),
                  **{what: (rows, min(cols, n))
                     for what, cols in cls.step_jacobians(options, problem).items()}}
        if (later := cls.later_fit_grid(options)) is not None:
            shapes["θ₀'s later stages (value+gradient)"] = (eq.point_count(later) * (eq.dim + 1),
                                                           min(options.fit.stage1_subsample, n))
        what, (r, c) = max(shapes.items(), key=lambda item: item[1][0] * item[1][1])
        return {"method.grid": (8 * r * c, f"{what}: a {r:,} × {c:,} Jacobian")}

    @classmethod
    def later_fit_grid(cls, options: ThetaOptions) -> int | None:
        """The fit grid of a multi-stage network's later stages (``network.refine`` times θ₀'s,
        :mod:`teng_eq.network.multistage`); None for a network of one stage."""
        refine = getattr(options.network, "refine", None)
        return None if refine is None else refine * options.fit.grid_for(options.grid)

    @classmethod
    def network_template(cls, options: ThetaOptions, problem: Problem) -> Network:
        eq = problem.equation
        init = resolve_init(options.network.init, eq, options.grid, options.fit.grid_for(options.grid))
        net = make_network(options.network, eq.dim, eq.domain.embedding_periods, problem.seed, init,
                           eq.outputs)
        imposition = eq.domain.imposition()
        return net if imposition is None else Imposed(net, *imposition)

    @classmethod
    def build(cls, options: ThetaOptions, problem: Problem, *, cache_dir=None, log=None) -> ThetaMethod:
        """Build the network, fit (or load) θ₀ on its own grid (``fit.grid``) and the
        subclass's :meth:`parts` on the run's; both on the points split over ``problem.devices``
        (:meth:`mesh`)."""
        eq = problem.equation
        net = cls.network_template(options, problem)
        fit_grid = options.fit.grid_for(options.grid)
        mesh = cls.mesh(options, problem)
        # θ₀ depends on the grid it was fitted on, not on the run's: runs on different
        # grids share one θ₀ fitted on the same fit grid.
        network = {**dataclasses.asdict(options.network), "init": net.init}
        if not eq.components:  # a scalar's network is the same whatever a system's would be
            network.pop("components", None)  # (a multi-stage network has it in its stage block)
        description = dict(**eq.fit_description(), network=network,
                           grid=fit_grid, seed=problem.seed,
                           fit=dataclasses.asdict(dataclasses.replace(options.fit, grid=fit_grid)))
        # Fresh points (a sampled box's ``fresh``) for θ₀'s value stage as for the steps.
        move = None
        if eq.domain.fresh:
            description["fit_points"] = "moved each chunk"
            move = eq.domain.move
        if mesh is not None:  # sums over points in another order: last bits of their own
            description["devices"] = mesh.size
        later = {} if (grid := cls.later_fit_grid(options)) is None else {"later": eq.quadrature(grid)}
        _, key = jax.random.split(jax.random.PRNGKey(problem.seed))
        theta0, report = cached_initial_parameters(net, eq.u0, eq.quadrature(fit_grid), key=key,
                                                   fit=options.fit, description=description,
                                                   directory=cache_dir, log=log, move=move, mesh=mesh,
                                                   **later)
        space = ParamSpace(net)
        return cls(n_steps=problem.n_steps, space=space, theta0=theta0, report=report,
                   **cls.parts(options, problem, space, eq.quadrature(options.grid)))

    @classmethod
    def mesh(cls, options: ThetaOptions, problem: Problem) -> PointMesh | None:
        """The local devices the fits' points are split over (:func:`~teng_eq.fit.mesh.point_mesh`;
        None: one), refused in one line where the fit grids' points do not split evenly."""
        mesh = point_mesh(problem.devices) if cls.shards else None
        if mesh is not None:
            eq, fit_grid = problem.equation, options.fit.grid_for(options.grid)
            mesh.check_points(eq.point_count(options.grid), f"grid={options.grid}")
            mesh.check_points(eq.point_count(fit_grid), f"θ₀'s fit grid (fit.grid={fit_grid})")
        return mesh

    @classmethod
    def parts(cls, options, problem: Problem, space: ParamSpace, quadrature: Quadrature) -> dict:
        """The subclass's own fields, built on the network ``space`` and the fit ``quadrature``."""
        return {}

    def init(self) -> Float[Array, " params"]:
        return self.theta0

    def values(self, state, points, t=None):
        return self.space.apply(self.parameters(state), points)

    def network(self, state):
        return self.space.network(self.parameters(state))

    def fit_report(self) -> FitReport | None:
        return self.report
