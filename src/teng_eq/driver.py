"""The run loop, top to bottom: a run is one immutable :class:`RunState`; :func:`advance`
takes it one accepted step further, the one place where a step is tried, kept or tried
again, measured and judged diverged; :func:`run` calls it until the schedule is done and
is the one place with side effects, its ``callbacks`` (MLflow, the progress bar, the
user's ``on_step``, interrupts, checkpoints) seeing each step's record and the state
after it. The schedule proposes a step's size and judges each try (:class:`FixedSteps`
keeps every one; :class:`Adaptive`, ``dt: auto``, redoes a rejected one from the same
state with the same key and a smaller Δt).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

import jax
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree

from teng_eq.checkpoint import Checkpoint, CheckpointStore, state_bytes, state_from_bytes
from teng_eq.config import RunConfig
from teng_eq.controller import Controller, ControllerState
from teng_eq.errors import Diverged, WriteFailed
from teng_eq.estimate import CompiledEstimate, ErrorEstimate
from teng_eq.methods.base import Method, StepInputs
from teng_eq.metrics import monte_carlo_se, squared_norms
from teng_eq.results import Row, StepRecord

#: A callback: a step's record as reported and the state after it; a true value stops the run there.
Callback = Callable[[StepRecord, "RunState"], "bool | None"]


@dataclasses.dataclass(frozen=True)
class Program:
    """A run's functions, compiled once from the method's initial state: the step
    (:func:`lower_step`), û on the evaluation points and on a Dirichlet boundary (None
    without one), the error estimate (None with ``estimate: none``); ``seconds``: the
    time it took (``compile_s``)."""

    step: Callable
    evaluate: Callable
    boundary: Callable | None
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
        at = lambda where: jax.jit(lambda s, t: method.values(s, where, t)).lower(state, 0.0).compile()
        evaluate, boundary = at(points), cfg.equation.boundary_points(cfg.eval_grid)
        on_boundary = None if boundary is None else at(boundary)
        defect = None if cfg.estimate == "none" else method.defect(cfg.estimate)
        estimate = None if defect is None else CompiledEstimate(defect, cfg.estimate, method.parameters, state)
        invariants, initial = None, {}
        if cfg.equation.components and cfg.equation.conserves:
            invariants = jax.jit(lambda s: cfg.equation.integrals(method.network(s).vector, cfg.eval_grid))
            initial = {k: float(v) for k, v in invariants(state).items()}
        return cls(step, evaluate, on_boundary, estimate, inputs, time.perf_counter() - start, invariants, initial)

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
    error where it reads one, its start t where the equation depends on t."""
    takes_dt = cfg.adaptive or method.error_order(cfg.method.options) > 0
    return StepInputs(dt=0.0 if takes_dt else None, expected=0.0 if method.expects_error else None,
                      t=0.0 if method.sequential and not cfg.equation.autonomous else None)


def lower_step(method: Method, cfg: RunConfig, key: PRNGKeyArray) -> jax.stages.Lowered:
    """``method.step(state, key, inputs)`` traced from its initial state, one signature for
    every method. A closure: the method's arrays (grid, index tables) become constants."""
    return jax.jit(lambda s, k, i: method.step(s, k, i)).lower(method.init(), key, step_inputs(method, cfg))


@dataclasses.dataclass(frozen=True)
class Clock:
    """Seconds a run spent, by part: the compiled steps (``runtime_s``), the error
    evaluation (``eval_s``), the error estimate (``estimate_s``)."""

    stepping: float = 0.0
    eval_s: float = 0.0
    estimate_s: float = 0.0

    def add(self, **seconds: float) -> Clock:
        return dataclasses.replace(self, **{k: getattr(self, k) + v for k, v in seconds.items()})


@dataclasses.dataclass(frozen=True)
class RunState:
    """A run after ``n`` accepted steps, all a checkpoint keeps: the ``method``'s state, the
    time ``t`` it reached (0 for a global-in-time method), its ``rows`` (the start and
    steps 1..n, or blocks 1..n), the :class:`Clock`, the stage ``iterations`` of every try,
    the controller's state (``dt: auto``) and the error estimate's (None without them)."""

    method: PyTree
    n: int
    t: float
    rows: tuple[Row, ...]
    clock: Clock = Clock()
    iterations: float = 0.0
    controller: ControllerState | None = None
    estimate: ErrorEstimate | None = None

    def info(self) -> dict[str, float]:
        """The numbers a checkpoint keeps beside the method's state and the rows."""
        out = {**dataclasses.asdict(self.clock), "iterations_total": self.iterations,
               "est_error": self.estimate.error if self.estimate is not None else np.nan}
        return out | (self.controller.as_info() if self.controller is not None else {})


@dataclasses.dataclass(frozen=True)
class FixedSteps:
    """``n_steps`` steps of ``dt`` (or blocks), step n ending at ``n·dt``; every try kept."""

    dt: float
    n_steps: int
    logs_time = False  # t and Δt are known in advance: not logged per step

    def done(self, state: RunState) -> bool:
        return state.n >= self.n_steps

    def propose(self, state: RunState, controller, cap: float = math.inf) -> tuple[float, float]:
        return self.dt, (state.n + 1) * self.dt

    def judge(self, controller, h: float, metrics) -> tuple[bool, None, None]:
        return True, None, None


@dataclasses.dataclass(frozen=True)
class Adaptive:
    """``dt: auto``: the ``controller`` proposes each step's size, landing on ``stops``, and
    judges each try by its embedded estimate of ``order``: ``(keep, its state after it, why
    the run cannot go on or None)``. A try is at most ``cap`` (:meth:`stable_step`)."""

    controller: Controller
    stops: Sequence[float]
    order: int
    constant: float  # of the embedded estimate's leading term (Method.error_constant)
    stability: float | None = None  # x of the step's stability interval [−x, 0] (Method.stability_limit)
    logs_time = True

    #: The share of the stable step (``cap``) a first try of ``dt_initial: auto`` may take:
    #: θ₀'s fit residual between the nodes is no part of the error model, and a first step
    #: at the stable step left Kuramoto–Sivashinsky's to grow until the run failed.
    FIRST_OF_CAP: ClassVar[float] = 0.25

    def first(self, norm: float, derivative: float | None, cap: float = math.inf) -> ControllerState:
        """The controller's state before the first try (:meth:`Controller.first_step`), at
        most ``cap`` (a number ``dt_initial``) or :attr:`FIRST_OF_CAP` of it (``auto``)."""
        h = self.controller.first_step(norm, derivative, self.constant, self.order, self.stops[-1])
        return ControllerState(min(h, cap * (self.FIRST_OF_CAP if self.controller.dt_initial == "auto" else 1.0)))

    def stable_step(self, radius: float | None) -> float:
        """``safety · x / ρ``: the largest step stable on every mode the fit resolves, which
        L′[û] damps at rates up to ``radius`` ρ (:meth:`~teng_eq.estimate.Transport.radius`).
        An explicit step beyond it amplifies the fastest of them by more than 1 per step,
        unseen by the embedded estimate until it dominates (biharmonic κ = 0.01 on 32²
        diverged so at t = 0.036 without the cap). ∞: no cap (no radius, no stability limit,
        ``controller.stability_cap: false``)."""
        if self.stability is None or not radius or not self.controller.stability_cap:
            return math.inf
        return self.controller.safety * self.stability / radius

    def done(self, state: RunState) -> bool:
        return state.t >= self.stops[-1]

    def propose(self, state: RunState, controller: ControllerState, cap: float = math.inf) -> tuple[float, float]:
        return self.controller.plan(state.t, min(controller.dt, cap), self.stops)

    def judge(self, controller: ControllerState, h: float, metrics) -> tuple[bool, ControllerState, str | None]:
        keep, after, r = self.controller.decide(controller, h, float(metrics["local_error"]),
                                                float(metrics["u_l2"]), self.order)
        return keep, after, None if keep or not self.controller.too_small(after) else (
            f"the step-size controller needs a step below controller.dt_min={self.controller.dt_min:g} "
            f"(its estimate: {r:.3g} times the tolerance at Δt={h:.3g})")


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
        norms (on sampled points also the error's Monte Carlo standard error), max |û| on the
        boundary, the snapshot (at a snapshot step, or under ``dt: auto`` at the first step at
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
        if ref is not None and self.cfg.equation.sampled:
            out["rel_se"] = monte_carlo_se(u, ref)
        if self.program.boundary is not None:
            out["boundary"] = float(np.max(np.abs(np.asarray(self.program.boundary(state, t)))))
        if any(since < s <= t for s in self.times) if self.cfg.adaptive else (n in self.steps):
            out["snapshot"] = (u, ref)
            out["state"] = state_bytes(state) if keep_state else None
        return out, time.perf_counter() - start

    def per_component(self, u, ref, state) -> dict[str, float]:
        """A system's ``rel_l2/<component>`` (against the reference) and ``drift/<name>`` of each
        invariant it declares, ``|I(t) − I(0)| / |I(0)|`` with I(0) θ₀'s."""
        out = {}
        if ref is not None:
            names = self.cfg.equation.components
            w = np.broadcast_to(np.asarray(self.weights, np.float64), u.shape).reshape(len(names), -1)
            for name, ui, ri, wi in zip(names, u.reshape(len(names), -1), ref.reshape(len(names), -1), w):
                err_sq, ref_sq = squared_norms(ui, ri, wi)
                out[f"rel_l2/{name}"] = float(np.sqrt(err_sq / ref_sq))
        if self.program.invariants is not None:
            for name, value in self.program.invariants(state).items():
                start = self.program.invariants0[name]
                out[f"drift/{name}"] = abs(float(value) - start) / abs(start)
        return out


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
        return RunState(method_state, 0, 0.0, ())
    fields, seconds = loop.meter.measure(0, 0.0, method_state, loop.keep_states)
    estimate, derivative = None, None
    if loop.program.estimate is not None:
        estimate, fields["u_sq"] = loop.program.estimate.start(method_state)
        fields["est"] = estimate.error
        derivative = loop.program.estimate.derivative(estimate, loop.order)
    controller = loop.schedule.first(float(np.sqrt(fields.get("u_sq", fields["ref_sq"]))), derivative,
                                     stable_step(loop, estimate)) if isinstance(loop.schedule, Adaptive) else None
    return RunState(method_state, 0, 0.0, (Row(0, 0.0, **fields),), Clock(eval_s=seconds),
                    controller=controller, estimate=estimate)


def advance(loop: Loop, state: RunState) -> RunState:
    """Step n + 1 from ``state``: tried until the schedule keeps a try, measured, and
    judged diverged — a non-finite metric or estimate, a ``step_loss`` above
    ``divergence_factor`` times the median before it, a controller that needs a step below
    ``dt_min``: :class:`~teng_eq.errors.Diverged`, the run still at step n — or accepted:
    the state after it, its row appended."""
    n, key = state.n + 1, jax.random.fold_in(loop.key, state.n + 1)
    controller, iterations, seconds = state.controller, state.iterations, 0.0
    cap = stable_step(loop, state.estimate)
    if math.isfinite(cap) and cap < loop.schedule.controller.dt_min:
        raise Diverged(f"{loop.name}: at t={state.t:.6g} the stable step {cap:.3g} (the fastest mode the fit "
                       f"resolves) is below controller.dt_min={loop.schedule.controller.dt_min:g}: an explicit "
                       "step cannot follow it (take an implicit method, or TENG-RK4 on imaginary rates)", n, n - 1)
    while True:
        h, t = loop.schedule.propose(state, controller, cap)
        # The local error the try may expect: the last step's, scaled by (h / its Δt)^order.
        expected = 0.0 if loop.program.inputs.expected is None or state.n == 0 else (
            state.rows[-1].metrics["local_error"] * (h / (state.t - state.rows[-2].t)) ** loop.order)
        inputs = loop.program.inputs.given(h, expected, state.t)
        new, record, elapsed = loop.program.attempt(state.method, key, inputs)
        seconds, iterations = seconds + elapsed, iterations + float(record.metrics.get("iterations", 0.0))
        keep, controller, stuck = loop.schedule.judge(controller, h, record.metrics)
        if keep:
            break
        if stuck is not None:
            raise Diverged(f"{loop.name}: at t={state.t:.6g} {stuck}", n, n - 1)
    metrics = {k: float(v) for k, v in record.metrics.items()} | ({"t": t, "dt": h} if loop.schedule.logs_time else {})
    if math.isfinite(cap):
        metrics["dt_stable"] = cap
    fields, clock, local, checked = observe(loop, state, new, metrics, h, t)
    losses = [r.metrics["step_loss"] for r in state.rows if r.n > 0 and "step_loss" in r.metrics]
    why = divergence_reason(checked, losses or None, n, loop.divergence_factor, scale=fields.get("ref_sq", 0.0),
                             error=loop.divergence_error)
    estimate = state.estimate
    if why is None and local is not None:
        estimate = estimate.advance(h, metrics, *local)
        fields["est"] = estimate.error
        if not np.isfinite(estimate.error / np.sqrt(fields["u_sq"])):
            why = "non-finite est_rel_l2"
    if why is not None:
        where = f"step {n} (t={t:.6g})" if loop.sequential else f"block {n}"
        raise Diverged(f"{loop.name} diverged at {where}: {why}", n, n - 1)
    clock = clock.add(stepping=seconds)
    row = Row(n, t if loop.sequential else None, metrics, record.table(), clock.stepping, **fields)
    return RunState(new, n, t if loop.sequential else 0.0, (*state.rows, row), clock, iterations, controller,
                    estimate)


def stable_step(loop: Loop, estimate: ErrorEstimate | None) -> float:
    """The largest stable try from the estimate's latest fields under ``dt: auto``
    (:meth:`Adaptive.stable_step`); ∞ at a fixed Δt or without the transport estimate."""
    if not isinstance(loop.schedule, Adaptive) or estimate is None:
        return math.inf
    return loop.schedule.stable_step(loop.program.estimate.radius(estimate))


def observe(loop: Loop, state: RunState, new, metrics: dict, h: float, t: float):
    """A kept try from ``state`` to ``new`` measured: its row's fields (a sequential
    method's), the clock, the estimate's ``(defect, (start, end) fields)`` (None without one),
    whose scalars join ``metrics``, and what divergence is judged on (the error and boundary too)."""
    clock, local, fields = state.clock, None, {}
    if loop.program.estimate is not None:
        begin = time.perf_counter()
        vectors, scalars, ends = loop.program.estimate.local(state.estimate.fields, state.method, new, h, state.t)
        fields["u_sq"] = scalars.pop("u_l2") ** 2
        metrics.update(scalars)
        local, clock = (vectors["defect"], ends), clock.add(estimate_s=time.perf_counter() - begin)
    checked = dict(metrics)
    if loop.sequential:
        measured, seconds = loop.meter.measure(state.n + 1, t, new, loop.keep_states, since=state.t)
        metrics.update(measured.pop("metrics", {}))
        fields, clock = fields | measured, clock.add(eval_s=seconds)
        if loop.meter.reference is not None:
            checked["rel_l2"] = float(np.sqrt(np.float64(fields["err_sq"]) / fields["ref_sq"]))
    if "boundary" in fields:
        checked["boundary_max_abs"] = fields["boundary"]
    return fields, clock, local, checked


def divergence_reason(metrics, losses: Sequence[float] | None, n: int, factor: float,
                      scale: float = 0.0, error: float = math.inf) -> str | None:
    """Why step ``n`` with ``metrics`` counts as diverged (``losses``: the step losses
    so far, by step), or None: a non-finite metric; a measured ``rel_l2`` above ``error``
    (the job's default 1: the error larger than the solution, which a field of zeros would
    beat; judged from the first step on, where no median of earlier losses exists yet); a
    step loss above ``factor`` times the median of the earlier ones, floored at ``ε·scale``
    (``scale`` = ‖u_ref‖² at the step, ε the float64 machine epsilon): losses at round-off
    level may jump by orders of magnitude without diverging."""
    bad = sorted(k for k, v in metrics.items() if not np.isfinite(v))
    if bad:
        return f"non-finite {', '.join(bad)}"
    if metrics.get("rel_l2", 0.0) > error:
        return f"rel_l2 {metrics['rel_l2']:.3e} is above divergence_error={error:g}"
    loss = metrics.get("step_loss")
    if loss is None or losses is None or n < 2:
        return None
    median = max(float(np.median(losses[: n - 1])), float(np.finfo(np.float64).eps) * scale)
    if median > 0 and loss > factor * median:
        return (f"step_loss {loss:.3e} is {loss / median:.3g} times the median of the steps before it "
                f"(divergence_factor={factor:g})")
    return None


def run(loop: Loop, state: RunState, callbacks: Sequence[Callback] = (),
        checkpoints: Checkpoints | None = None) -> RunState:
    """``state`` stepped to the end of the schedule (or until a callback returns a true
    value). The rows already in it (the start; on a resume, the steps done) are reported
    first, then each accepted step, to every callback in turn. The last state is
    checkpointed, and — whatever ends the run early (a divergence, an exception from a
    callback: a stop a signal asked for) — the last good one."""
    def report(row: Row, state: RunState) -> bool:
        answers = [cb(row.record(loop.n_steps), state) for cb in callbacks]  # each runs, whatever another says
        return any(answers)

    try:
        stopped = False
        for row in state.rows:  # what a callback answers of the last one counts: the run is there
            stopped = report(row, state)
        while not (stopped or loop.schedule.done(state)):
            state = advance(loop, state)
            stopped = report(state.rows[-1], state)
    except WriteFailed:
        raise
    except BaseException:
        if checkpoints is not None:
            with contextlib.suppress(Exception):  # else the previous checkpoint stands
                checkpoints.save(state)
        raise
    if checkpoints is not None:
        checkpoints.save(state)
    return state


@dataclasses.dataclass
class Checkpoints:
    """A run's checkpoints into ``store``: a callback saving every ``every`` steps (not at a
    fixed-Δt run's ``last``: the end's is next), and :meth:`save`, which :func:`run` calls
    at the end and at the last good step of a run that ends early (``saved``: the step on
    disk, -1: none). A checkpoint that could not be written ends the run."""

    store: CheckpointStore
    every: int | None
    last: int | None
    saved: int = -1

    def save(self, state: RunState) -> None:
        if self.saved != state.n:
            vector = state.estimate.vector if state.estimate is not None else np.zeros(0)
            self.store.save(state.n, state.method, state.rows, vector, state.info())
            self.saved = state.n

    def __call__(self, record: StepRecord, state: RunState) -> None:
        if self.every and record.step == state.n > 0 and state.n % self.every == 0 and state.n != self.last:
            self.save(state)


def resume(saved: Checkpoint, loop: Loop, adaptive: bool) -> RunState:
    """The run as the checkpoint ``saved`` left it, its snapshots made again."""
    rows, info = saved.rows(loop.sequential), saved.info
    rows = [r if r.state is None else dataclasses.replace(r, snapshot=(
        np.asarray(loop.program.evaluate(state_from_bytes(r.state, saved.state), r.t)),
        loop.meter.reference_at(r.n, r.t))) for r in rows]
    estimate, t = loop.program.estimate, rows[-1].t if loop.sequential else 0.0
    errors = None if estimate is None else ErrorEstimate(  # with the next step's start fields, as unstopped
        estimate.kind, estimate.weights, saved.history["est_vector"], info["est_error"], transport=estimate.transport,
        fields=estimate.fields(saved.state, t) if loop.sequential else None)
    clock = Clock(**{k: info[k] for k in ("stepping", "eval_s", "estimate_s")})
    return RunState(saved.state, saved.step, t, tuple(rows), clock,
                    info["iterations_total"], ControllerState.from_info(info) if adaptive else None, errors)
