"""The run loop, top to bottom: a run is one immutable :class:`RunState`; :func:`advance`
takes it one accepted step further, the one place where a step is tried, kept or tried
again, measured and judged diverged; :func:`run` calls it until the schedule is done and
is the one place with side effects, through its callbacks
(:class:`~teng_eq.run.callbacks.Callback`: MLflow, the progress bar, checkpoints, signals,
the user's), which see each step's record and the state after it. The schedule
(:mod:`teng_eq.run.schedule`) proposes a step's size and judges each try.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterable

import jax
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree

from teng_eq.errors import Diverged
from teng_eq.estimate.running import CompiledEstimate, ErrorEstimate
from teng_eq.fit.results import StepRecord
from teng_eq.methods.base import Method, StepInputs
from teng_eq.run.callbacks import Callback, ordered
from teng_eq.run.checkpoint import Checkpoint, state_bytes, state_from_bytes
from teng_eq.run.config import RunConfig
from teng_eq.run.controller import ControllerState
from teng_eq.run.metrics import monte_carlo_se, squared_norms
from teng_eq.run.result import History, Row
from teng_eq.run.schedule import Adaptive, FixedSteps, below_dt_min


@dataclasses.dataclass(frozen=True)
class Meter:
    """û against the ``reference`` (None: ‖û‖² alone) on the evaluation points, the fields
    kept at the snapshot ``steps`` (fixed Δt) or ``times`` (``dt: auto``)."""

    cfg: RunConfig
    program: Program
    reference: object
    weights: object
    steps: frozenset = frozenset()
    times: frozenset = frozenset()

    def reference_at(self, n: int, t: float) -> np.ndarray | None:
        if self.reference is None:
            return None
        return self.reference.values_at(t, self.cfg.eval_grid) if self.cfg.adaptive else (
            self.reference.values(n, self.cfg.eval_grid))

    def measure(self, n: int, t: float, state, keep_state: bool, since: float = -1.0) -> tuple[dict, float]:
        """The row's fields at time index n (time t; ``since``: the time before): the squared
        norms (on sampled points also the error's Monte Carlo standard error), max |û − g| on
        the Dirichlet boundary, the snapshot (at a snapshot step, or under ``dt: auto`` at the first step at
        or after a snapshot time, which steps do not land on; ``keep_state``: the state's
        bytes too); the seconds."""
        start = time.perf_counter()
        u = np.asarray(self.program.evaluate(state, t))
        ref = self.reference_at(n, t)
        err_sq, ref_sq = squared_norms(u, ref, self.weights) if ref is not None else (
            np.nan, squared_norms(u, u, self.weights)[1])
        out = {"err_sq": float(err_sq), "ref_sq": float(ref_sq)}
        if self.cfg.equation.components:
            out["metrics"] = self.per_component(u, ref, state)
        if ref is not None and self.cfg.equation.domain.sampled:
            out["rel_se"] = monte_carlo_se(u, ref)
        if self.program.boundary is not None:
            on_edge = np.asarray(self.program.boundary(state, t))
            data = self.cfg.equation.domain.boundary_data(np.asarray(self.program.boundary_points), t)
            out["boundary"] = float(np.max(np.abs(on_edge - data)))
        if any(since < s <= t for s in self.times) if self.cfg.adaptive else (n in self.steps):
            out["snapshot"] = (u, ref)
            out["state"] = state_bytes(state) if keep_state else None
        return out, time.perf_counter() - start

    def per_component(self, u, ref, state) -> dict[str, float]:
        """A system's ``rel_l2/<component>`` (against the reference; a component whose reference
        is 0 everywhere, e.g. a v₀ = 0, relative to the whole reference instead) and
        ``drift/<name>`` of each invariant it declares, ``|I(t) − I(0)| / |I(0)|`` with I(0) θ₀'s."""
        out = {}
        if ref is not None:
            names = self.cfg.equation.components
            w = np.broadcast_to(np.asarray(self.weights, np.float64), u.shape).reshape(len(names), -1)
            parts = [squared_norms(ui, ri, wi) for ui, ri, wi in
                     zip(u.reshape(len(names), -1), ref.reshape(len(names), -1), w)]
            whole = sum(ref_sq for _, ref_sq in parts)
            for name, (err_sq, ref_sq) in zip(names, parts):
                out[f"rel_l2/{name}"] = float(np.sqrt(err_sq / (ref_sq if ref_sq > 0 else whole)))
        if self.program.invariants is not None:
            for name, value in self.program.invariants(state).items():
                start = self.program.invariants0[name]
                out[f"drift/{name}"] = abs(float(value) - start) / abs(start)
        return out


@dataclasses.dataclass(frozen=True)
class Program:
    """A run's functions, compiled once from the method's initial state: the step
    (:func:`lower_step`), û on the evaluation points and the boundary's αû + β∂ₙû on its
    ``boundary_points`` (None without a boundary; :func:`on_edge`), the error estimate (None with ``estimate:
    none``); ``seconds``: the time it took (``compile_s``)."""

    step: Callable
    evaluate: Callable
    boundary: Callable | None
    boundary_points: object  # (m, dim) points on the boundary, or None
    estimate: CompiledEstimate | None
    inputs: StepInputs  # what the step takes: Δt, the expected error, t (zeros; None: not taken)
    seconds: float
    # A system's conserved integrals of a state (None: it declares none) and their values at θ₀.
    invariants: Callable | None = None
    invariants0: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def build(cls, method: Method, cfg: RunConfig, key: PRNGKeyArray, points) -> Program:
        start, state = time.perf_counter(), method.init()
        step, inputs = lower_step(method, cfg, key).compile(), step_inputs(method, cfg)

        def at(where):
            return jax.jit(lambda s, t: method.values(s, where, t)).lower(state, 0.0).compile()

        evaluate, edge = at(points), cfg.equation.domain.boundary_points(cfg.eval_grid)
        on_boundary = None if edge is None else jax.jit(
            lambda s, t: on_edge(method, s, edge, t)).lower(state, 0.0).compile()
        boundary = None if edge is None else edge.points
        defect = None if cfg.estimate == "none" else method.defect(cfg.estimate)
        estimate = (None if defect is None
                    else CompiledEstimate(defect, cfg.estimate, method.parameters, state))
        invariants, initial = None, {}
        if cfg.equation.components and cfg.equation.conserves:
            invariants = jax.jit(lambda s: cfg.equation.integrals(method.network(s).vector, cfg.eval_grid))
            initial = {k: float(v) for k, v in invariants(state).items()}
        return cls(step, evaluate, on_boundary, boundary, estimate, inputs, time.perf_counter() - start,
                   invariants, initial)

    def attempt(self, state, key, inputs: StepInputs) -> tuple[PyTree, StepRecord, float]:
        """One try from ``state``: the new state, its record (on the host), its seconds."""
        start = time.perf_counter()
        new, record = self.step(state, key, inputs)
        jax.block_until_ready(new)
        return new, jax.device_get(record), time.perf_counter() - start


def step_inputs(method: Method, cfg: RunConfig) -> StepInputs:
    """What the method's compiled step takes, as zeros (None: not an argument): Δt wherever
    the method can run under the controller (at a fixed Δt too: a Δt sweep's runs lower to
    one program, compiled once for all by jax's persistent cache), the expected local
    error where it reads one, its start t where the problem depends on t (``timed``)."""
    takes_dt = cfg.adaptive or method.error_order(cfg.method.options) > 0
    return StepInputs(dt=0.0 if takes_dt else None, expected=0.0 if method.expects_error else None,
                      t=0.0 if method.sequential and cfg.equation.timed else None)


def lower_step(method: Method, cfg: RunConfig, key: PRNGKeyArray) -> jax.stages.Lowered:
    """``method.step(state, key, inputs)`` traced from its initial state, one signature for
    every method. A closure: the method's arrays (grid, index tables) become constants."""
    return jax.jit(lambda s, k, i: method.step(s, k, i)).lower(method.init(), key, step_inputs(method, cfg))


@dataclasses.dataclass(frozen=True)
class Clock:
    """Seconds a run spent, by part: the compiled steps (``runtime_s``), the error
    evaluation (``eval_s``), the error estimate (``estimate_s``), the checkpoints this
    attempt wrote (``checkpoint_s``: the ``save`` stage of its callbacks)."""

    stepping: float = 0.0
    eval_s: float = 0.0
    estimate_s: float = 0.0
    checkpoint_s: float = 0.0

    def add(self, **seconds: float) -> Clock:
        return dataclasses.replace(self, **{k: getattr(self, k) + v for k, v in seconds.items()})


@dataclasses.dataclass(frozen=True)
class RunState:
    """A run after ``n`` accepted steps, all a checkpoint keeps: the ``method``'s state, the
    time ``t`` it reached (0 for a global-in-time method), its ``history`` (the rows of the
    start and steps 1..n, or blocks 1..n), the :class:`Clock`, the stage ``iterations`` of
    every try, the controller's state (``dt: auto``) and the error estimate's (None without
    them)."""

    method: PyTree
    n: int
    t: float
    history: History
    clock: Clock = Clock()
    iterations: float = 0.0
    controller: ControllerState | None = None
    estimate: ErrorEstimate | None = None

    @property
    def rows(self) -> tuple[Row, ...]:
        """Every row so far (a copy: for a checkpoint or the result, not for each step)."""
        return tuple(self.history)

    def info(self) -> dict[str, float]:
        """The numbers a checkpoint keeps beside the method's state and the rows."""
        out = {**dataclasses.asdict(self.clock), "iterations_total": self.iterations,
               "est_error": self.estimate.error if self.estimate is not None else np.nan}
        return out | (self.controller.as_info() if self.controller is not None else {})


@dataclasses.dataclass(frozen=True)
class Loop:
    """What stays fixed while a run steps: the ``program``, ``schedule`` and ``meter``, the
    run's key (step n draws ``fold_in(key, n)``, every try of it and after a resume alike),
    whether the method is ``sequential`` (else its steps are blocks of a global-in-time
    optimisation), its estimate's ``order``, its steps (None under ``dt: auto``), whether
    snapshot states are kept (with checkpoints), ``divergence_factor`` and
    ``divergence_error`` (:func:`divergence_reason`), its ``name``."""

    program: Program
    schedule: FixedSteps | Adaptive
    meter: Meter
    key: PRNGKeyArray
    sequential: bool
    order: int
    n_steps: int | None
    keep_states: bool
    divergence_factor: float
    divergence_error: float
    name: str


def start(loop: Loop, method_state) -> RunState:
    """A run at t = 0: for a sequential method θ₀'s error measured and the estimate
    started from it (exact: u₀ is known), as row 0; under ``dt: auto`` the first try's size."""
    if not loop.sequential:
        return RunState(method_state, 0, 0.0, History())
    fields, seconds = loop.meter.measure(0, 0.0, method_state, loop.keep_states)
    estimate, derivative, oscillatory = None, None, False
    if loop.program.estimate is not None:
        estimate, u_sq = loop.program.estimate.start(method_state)
        fields = fields | {"u_sq": u_sq, "est": estimate.error}
        derivative = loop.program.estimate.derivative(estimate, loop.order)
        oscillatory = loop.program.estimate.oscillatory(estimate)
    controller = loop.schedule.first(float(np.sqrt(fields.get("u_sq", fields["ref_sq"]))), derivative,
                                     stable_step(loop, estimate), oscillatory)
    return RunState(method_state, 0, 0.0, History([Row(0, 0.0, **fields)]), Clock(eval_s=seconds),
                    controller=controller, estimate=estimate)


def advance(loop: Loop, state: RunState) -> RunState:
    """Step n + 1 from ``state``: tried until the schedule keeps a try, measured, and
    judged diverged (:func:`divergence_reason`: a non-finite metric or estimate, a measured
    or estimated error above the solution, a fit that misses its target by more than the
    solution, a ``step_loss`` above ``divergence_factor`` times the median before it), or a
    controller that needs a step below ``dt_min``: :class:`~teng_eq.errors.Diverged`, the
    run still at step n — or accepted: the state after it, its row appended."""
    n, key = state.n + 1, jax.random.fold_in(loop.key, state.n + 1)
    controller, iterations, seconds = state.controller, state.iterations, 0.0
    cap = stable_step(loop, state.estimate)
    if cap < loop.schedule.dt_min:
        raise Diverged(below_dt_min(loop.name, state.t, cap, loop.schedule.dt_min), n, n - 1)
    while True:
        h, t = loop.schedule.propose(state, controller, cap)
        # The local error the try may expect: the last step's, scaled by (h / its Δt)^order.
        expected = 0.0 if loop.program.inputs.expected is None or state.n == 0 else (
            state.history[-1].metrics["local_error"] * (h / (state.t - state.history[-2].t)) ** loop.order)
        inputs = loop.program.inputs.given(h, expected, state.t)
        new, record, elapsed = loop.program.attempt(state.method, key, inputs)
        seconds, iterations = seconds + elapsed, iterations + float(record.metrics.get("iterations", 0.0))
        keep, controller, stuck = loop.schedule.judge(controller, h, record.metrics)
        if keep:
            break
        if stuck is not None:
            raise Diverged(f"{loop.name}: at t={state.t:.6g} {stuck}", n, n - 1)
    metrics = ({k: float(v) for k, v in record.metrics.items()}
               | ({"t": t, "dt": h} if loop.schedule.logs_time else {}))
    if math.isfinite(cap):
        metrics["dt_stable"] = cap
    metrics, fields, clock, local, checked = observe(loop, state, new, metrics, h, t)
    # The solution's size where the step starts (the reference's, else û's; 0 for a block, whose
    # run starts with no row): a step that blows up misses a target far larger than it, by about
    # the size it reaches.
    size = state.history[-1].ref_sq if loop.sequential else 0.0
    why = divergence_reason(checked, state.history.median, n, loop.divergence_factor,
                            scale=fields.get("ref_sq", 0.0), error=loop.divergence_error, size=size)
    estimate = state.estimate
    if why is None and local is not None:
        estimate = estimate.advance(h, metrics, *local)
        fields = fields | {"est": estimate.error}
        why = divergence_reason({"est_rel_l2": estimate.error / np.sqrt(fields["u_sq"])}, None, n,
                                loop.divergence_factor, error=loop.divergence_error)
    if why is not None:
        where = f"step {n} (t={t:.6g})" if loop.sequential else f"block {n}"
        raise Diverged(f"{loop.name} diverged at {where}: {why}", n, n - 1)
    clock = clock.add(stepping=seconds)
    row = Row(n, t if loop.sequential else None, metrics, record.table(), clock.stepping, **fields)
    return RunState(new, n, t if loop.sequential else 0.0, state.history.appended(row), clock, iterations,
                    controller, estimate)


def stable_step(loop: Loop, estimate: ErrorEstimate | None) -> float:
    """The largest stable try from the estimate's latest fields, where the schedule caps its
    steps (:meth:`~teng_eq.run.schedule.Adaptive.stable_step`); ∞ where it does not (a fixed
    Δt) or without the transport estimate."""
    if not loop.schedule.capped or estimate is None:
        return math.inf
    return loop.schedule.stable_step(loop.program.estimate.radius(estimate))


def on_edge(method: Method, state, rows, t):
    """``α û + β ∂ₙû`` of the ``method``'s field in ``state`` at the boundary ``rows`` (a
    :class:`~teng_eq.domains.quadrature.Quadrature` whose ``flux`` holds each row's normal
    and (α, β)); û alone where every β is 0 (no derivative is taken)."""
    flux = rows.flux
    if not np.any(np.asarray(flux.beta)):
        return flux.alpha * method.values(state, rows.points, t)
    u, du = jax.jvp(lambda p: method.values(state, p, t), (rows.points,), (flux.normals,))
    return flux.alpha * u + flux.beta * du


def observe(loop: Loop, state: RunState, new, metrics: dict, h: float, t: float):
    """A kept try from ``state`` to ``new`` measured: ``metrics`` with the estimate's scalars
    and a system's per-component errors, the row's fields (a sequential method's), the
    clock, the estimate's ``(defect, (start, end) fields)`` (None without one), and what
    divergence is judged on (the error and boundary too)."""
    clock, local, fields = state.clock, None, {}
    if loop.program.estimate is not None:
        begin = time.perf_counter()
        vectors, scalars, ends = loop.program.estimate.local(state.estimate.fields, state.method, new, h,
                                                             state.t)
        fields = {"u_sq": scalars["u_l2"] ** 2}
        metrics = metrics | {k: v for k, v in scalars.items() if k != "u_l2"}
        local, clock = (vectors["defect"], ends), clock.add(estimate_s=time.perf_counter() - begin)
    checked = dict(metrics)
    if loop.sequential:
        measured, seconds = loop.meter.measure(state.n + 1, t, new, loop.keep_states, since=state.t)
        metrics = metrics | measured.get("metrics", {})
        fields = fields | {k: v for k, v in measured.items() if k != "metrics"}
        clock = clock.add(eval_s=seconds)
        if loop.meter.reference is not None:
            checked["rel_l2"] = float(np.sqrt(np.float64(fields["err_sq"]) / fields["ref_sq"]))
    if "boundary" in fields:
        checked["boundary_error"] = fields["boundary"]
    return metrics, fields, clock, local, checked


def divergence_reason(metrics, median: float | None, n: int, factor: float,
                      scale: float = 0.0, error: float = math.inf, size: float = 0.0) -> str | None:
    """Why step ``n`` with ``metrics`` counts as diverged, or None: a non-finite metric; a
    measured ``rel_l2`` or an estimated ``est_rel_l2`` above ``error`` (the job's default 1:
    the error larger than the solution, which a field of zeros would beat); a ``step_loss``
    or ``holdout_loss`` above ``error² · size`` (``size``: ‖u‖² at the step's start; 0: not
    judged), i.e. ``‖û − target‖ > error · ‖u‖``, a fit that misses its target by more than
    the whole solution it started from. These three need no earlier step: they judge
    the first step on, where no median of earlier losses exists yet (a step far beyond the
    stable Δt blows up there). Then a step loss above ``factor`` times ``median``, the
    median of the earlier steps' losses (None: none yet), floored at ``ε·scale``
    (``scale`` = ‖u_ref‖² at the step, ε the float64 machine epsilon): losses at round-off
    level may jump by orders of magnitude without diverging."""
    bad = sorted(k for k, v in metrics.items() if not np.isfinite(v))
    if bad:
        return f"non-finite {', '.join(bad)}"
    for name in ("rel_l2", "est_rel_l2"):
        if metrics.get(name, 0.0) > error:
            return f"{name} {metrics[name]:.3e} is above divergence_error={error:g}"
    for name in ("step_loss", "holdout_loss"):
        if size > 0 and metrics.get(name, 0.0) > error**2 * size:
            return (f"{name} {metrics[name]:.3e} is above divergence_error² ‖u‖² = {error**2 * size:.3e}: "
                    "the step's fit misses its target by more than the solution it started from")
    loss = metrics.get("step_loss")
    if loss is None or median is None or n < 2:
        return None
    median = max(median, float(np.finfo(np.float64).eps) * scale)
    if median > 0 and loss > factor * median:
        return (f"step_loss {loss:.3e} is {loss / median:.3g} times the median of the steps before it "
                f"(divergence_factor={factor:g})")
    return None


def run(loop: Loop, state: RunState, callbacks: Iterable[Callback] = ()) -> RunState:
    """``state`` stepped to the end of the schedule, or until a callback's ``step`` returns a
    true value. Each callback (:mod:`teng_eq.run.callbacks`, in the order of their stages)
    begins; the rows already in the state (the start; on a resume, the steps done) are
    reported first, then each accepted step; each callback ends — or, whatever ends the run
    early (a divergence, a callback's exception: a stop a signal asked for), aborts with
    the last good state before the error is raised on. The ``save`` stage's seconds are
    the returned state's ``clock.checkpoint_s``."""
    hooks, saving = ordered(callbacks), 0.0
    try:
        _each(hooks, "begin", state)
        stopped = False
        for row in state.history:  # what a callback answers of the last one counts: the run is there
            stopped, seconds = _each(hooks, "step", row.record(loop.n_steps), state)
            saving += seconds
        while not (stopped or loop.schedule.done(state)):
            state = advance(loop, state)
            stopped, seconds = _each(hooks, "step", state.history[-1].record(loop.n_steps), state)
            saving += seconds
        saving += _each(hooks, "end", state)[1]
    except BaseException as error:
        for cb in hooks:
            with contextlib.suppress(Exception):  # the error that ended the run is the one to raise
                cb.abort(state, error)
        raise
    return dataclasses.replace(state, clock=state.clock.add(checkpoint_s=saving))


def _each(hooks: tuple[Callback, ...], hook: str, *args) -> tuple[bool, float]:
    """Every callback's ``hook`` called with ``args``, each whatever another answers: whether
    one answered true, and the seconds the ``save`` stage took."""
    answers, seconds = [], 0.0
    for cb in hooks:
        begin = time.perf_counter()
        answers.append(getattr(cb, hook)(*args))
        if cb.stage == "save":
            seconds += time.perf_counter() - begin
    return any(answers), seconds


def resume(saved: Checkpoint, loop: Loop) -> RunState:
    """The run as the checkpoint ``saved`` left it, its snapshots made again."""
    rows, info = saved.rows(loop.sequential), saved.info
    rows = [r if r.state is None else dataclasses.replace(r, snapshot=(
        np.asarray(loop.program.evaluate(state_from_bytes(r.state, saved.state), r.t)),
        loop.meter.reference_at(r.n, r.t))) for r in rows]
    estimate, t = loop.program.estimate, rows[-1].t if loop.sequential else 0.0
    errors = None if estimate is None else ErrorEstimate(  # with the next step's start fields, as unstopped
        estimate.kind, estimate.weights, saved.history["est_vector"], info["est_error"],
        transport=estimate.transport, fields=estimate.fields(saved.state, t) if loop.sequential else None)
    clock = Clock(**{k: info[k] for k in ("stepping", "eval_s", "estimate_s")})
    return RunState(saved.state, saved.step, t, History(rows), clock, info["iterations_total"],
                    loop.schedule.resumed(info), errors)
