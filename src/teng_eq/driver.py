"""The parts of a run's loop (:func:`teng_eq.simulation.run_simulation` puts them
together): :class:`Compiled`, the run's functions compiled once; :class:`RunState`,
everything that changes while the run steps, which is what a checkpoint keeps;
:func:`accepted_steps`, the one generator of accepted steps at a fixed Δt and under
``dt: auto`` alike; :class:`ErrorMeter`, û against the reference at a step's time;
:class:`Recorder`, the checkpoints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator

import jax
import numpy as np
from jaxtyping import PRNGKeyArray, PyTree

from teng_eq.checkpoint import Checkpoint, CheckpointStore, History, state_bytes, state_from_bytes
from teng_eq.config import RunConfig
from teng_eq.controller import ControllerState
from teng_eq.errors import Diverged, WriteFailed
from teng_eq.estimate import CompiledEstimate, ErrorEstimate
from teng_eq.methods.base import Method
from teng_eq.metrics import squared_norms
from teng_eq.results import StepRecord


def lower_step(method: Method, state, key, *, takes_dt: bool, expects: bool,
               takes_t: bool = False) -> jax.stages.Lowered:
    """``method.step`` traced for compilation: ``(state, key[, dt][, expected][, t])``.

    A closure, not the bound method: the method's arrays (grid, index tables) become
    constants of the one compiled step. Δt is an argument wherever the step takes one
    (``takes_dt``: a method that can run under the controller), at a fixed Δt too: runs
    that differ only in Δt (a Δt sweep) then lower to the same program, which jax's
    persistent compilation cache (:func:`teng_eq.cache.compilation_folder`) compiles once
    for all of them. The step's start ``t`` is an argument only for an equation that
    depends on t (``takes_t``): an autonomous one's step is the program it always was."""
    if takes_t:
        extra = ("dt",) * takes_dt + ("expected",) * expects + ("t",)
        return jax.jit(lambda s, k, *a: method.step(s, k, **dict(zip(extra, a)))).lower(
            state, key, *(0.0,) * len(extra))
    if expects:
        return jax.jit(lambda s, k, dt, e: method.step(s, k, dt, e)).lower(state, key, 0.0, 0.0)
    if takes_dt:
        return jax.jit(lambda s, k, dt: method.step(s, k, dt)).lower(state, key, 0.0)
    return jax.jit(lambda s, k: method.step(s, k)).lower(state, key)


@dataclasses.dataclass
class Compiled:
    """A run's functions, compiled once from the method's initial state: the step
    (:func:`lower_step`), û on the evaluation points and on a Dirichlet boundary
    (``boundary``: None without one), and the error estimate (None with ``estimate:
    none``); ``seconds``: the time it took (``compile_s``)."""

    step: Callable
    evaluate: Callable
    boundary: Callable | None
    estimate: CompiledEstimate | None
    takes_dt: bool  # the step takes Δt as an argument (any method with an embedded estimate)
    expects: bool  # ... and the step's expected local error (TENG's local_error stopping)
    takes_t: bool  # ... and its start t (an equation that depends on t)
    seconds: float

    @classmethod
    def build(cls, method: Method, cfg: RunConfig, key: PRNGKeyArray, points) -> Compiled:
        """From the method's initial state; ``points``: the evaluation points."""
        start, state = time.perf_counter(), method.init()
        expects, takes_dt = method.expects_error, cfg.adaptive or method.error_order(cfg.method.options) > 0
        takes_t = method.sequential and not cfg.equation.autonomous
        step = lower_step(method, state, key, takes_dt=takes_dt, expects=expects, takes_t=takes_t).compile()
        evaluate = jax.jit(lambda s, t: method.values(s, points, t)).lower(state, 0.0).compile()
        boundary = cfg.equation.boundary_points(cfg.eval_grid)
        on_boundary = None if boundary is None else (
            jax.jit(lambda s, t: method.values(s, boundary, t)).lower(state, 0.0).compile())
        defect = None if cfg.estimate == "none" else method.defect(cfg.estimate.startswith("hermite"))
        estimate = None if defect is None else CompiledEstimate(defect, cfg.estimate, method.parameters, state)
        return cls(step, evaluate, on_boundary, estimate, takes_dt, expects, takes_t, time.perf_counter() - start)

    def attempt(self, state, key, dt: float | None, expected: float, t: float) -> tuple[PyTree, StepRecord, float]:
        """One try of a step from ``state`` at time t: the new state, its record (on the
        host) and the seconds it took, waited for."""
        args = (state, key) + (dt,) * self.takes_dt + (expected,) * self.expects + (t,) * self.takes_t
        start = time.perf_counter()
        new, record = self.step(*args)
        jax.block_until_ready(new)
        return new, jax.device_get(record), time.perf_counter() - start


@dataclasses.dataclass
class Clock:
    """Seconds a run spent, by part: the compiled steps (``runtime_s``), the error
    evaluation (``eval_s``), the error estimate (``estimate_s``)."""

    stepping: float = 0.0
    eval_s: float = 0.0
    estimate_s: float = 0.0


@dataclasses.dataclass
class RunState:
    """Everything of a run that changes while it steps, i.e. what a checkpoint holds:
    the method's ``state`` after ``n`` accepted steps, the :class:`History` of steps
    1..n, the :class:`Clock`, the stage iterations of every try (rejected ones too),
    the controller's state (``dt: auto``) and the error estimate's (None without them)."""

    state: PyTree
    n: int
    history: History
    clock: Clock
    iterations: float = 0.0
    controller: ControllerState | None = None
    estimate: ErrorEstimate | None = None

    @property
    def t(self) -> float:
        return float(self.history.times[self.n])

    def info(self) -> dict[str, float]:
        """The numbers a checkpoint keeps beside the state and the history."""
        out = {**dataclasses.asdict(self.clock), "iterations_total": self.iterations,
               "est_error": self.estimate.error if self.estimate is not None else np.nan}
        return out | (self.controller.as_info() if self.controller is not None else {})

    @classmethod
    def resumed(cls, saved: Checkpoint, compiled: Compiled, adaptive: bool) -> RunState:
        """The run as ``saved`` left it."""
        history, info = History.from_arrays(saved.history), saved.info
        estimate = None if compiled.estimate is None else ErrorEstimate(
            compiled.estimate.kind, compiled.estimate.weights, history.est_vector, info["est_error"])
        return cls(saved.state, saved.step, history, Clock(**{k: info[k] for k in ("stepping", "eval_s", "estimate_s")}),
                   info["iterations_total"], ControllerState.from_info(info) if adaptive else None, estimate)


@dataclasses.dataclass(frozen=True)
class Step:
    """An accepted step n: the state it reached with its ``record`` and the seconds of its
    tries; under ``dt: auto``, the time ``t`` it reached and its Δt (else None)."""

    n: int
    state: PyTree
    record: StepRecord
    seconds: float
    t: float | None
    dt: float | None


def accepted_steps(run: RunState, compiled: Compiled, cfg: RunConfig, key_run: PRNGKeyArray, *,
                   n_steps: int | None, order: int, stops: list[float]) -> Iterator[Step]:
    """The run's accepted steps after ``run.n``, each tried from ``run.state`` (which the
    consumer advances before it asks for the next). Step n draws ``fold_in(key_run, n)``,
    every try of it and after a resume alike. At a fixed Δt there are ``n_steps`` (the
    method's: time steps, or a global-in-time method's blocks) and every try is
    accepted; under ``dt: auto`` (``n_steps`` None) a try whose embedded estimate (of
    order ``order``) exceeds the controller's tolerance is redone from the same state with
    a smaller Δt, the steps landing on ``stops`` up to ``t_final``, and a controller that
    needs a step below ``dt_min`` raises :class:`~teng_eq.errors.Diverged`."""
    control = cfg.controller

    def attempt(key, h):  # one try; its stage iterations counted
        expected = _expected(run, order, h) if compiled.expects else 0.0
        new, record, seconds = compiled.attempt(run.state, key, h, expected, run.t if compiled.takes_t else 0.0)
        run.iterations += float(record.metrics.get("iterations", 0.0))
        return new, record, seconds

    while (run.n < n_steps) if n_steps is not None else (run.t < cfg.t_final):
        n = run.n + 1
        key = jax.random.fold_in(key_run, n)
        if n_steps is not None:
            yield Step(n, *attempt(key, cfg.dt), None, None)
            continue
        seconds = 0.0
        while True:  # tries of step n, each from the same state
            h, t_new = control.plan(run.t, run.controller.dt, stops)
            new, record, elapsed = attempt(key, h)
            seconds += elapsed
            r = control.ratio(float(record.metrics["local_error"]), float(record.metrics["u_l2"]))
            if r <= 1.0:
                run.controller = control.accept(run.controller, h, r, order, clipped=h < run.controller.dt)
                break
            run.controller = control.reject(run.controller, h, r, order)
            if control.too_small(run.controller):
                run.clock.stepping += seconds
                raise Diverged(f"{cfg.method.name}: at t={run.t:.6g} the step-size controller needs a step below "
                               f"controller.dt_min={control.dt_min:g} (its estimate: {r:.3g} times the tolerance "
                               f"at Δt={h:.3g})", n, n - 1)
        yield Step(n, new, record, seconds, t_new, h)


def _expected(run: RunState, order: int, h: float) -> float:
    """The local error step ``run.n + 1`` of size h may expect: the last step's embedded
    estimate, scaled by (h / its Δt)^order (0 before the first step: the stages run to
    their caps)."""
    if run.n < 1:
        return 0.0
    times = run.history.times
    h_last = float(times[run.n] - times[run.n - 1])
    return float(run.history.metrics["local_error"][run.n - 1]) * (h / h_last) ** order


class ErrorMeter:
    """û against the reference at a time index, on the evaluation points: the squared
    norms into the history (and max |û| on a Dirichlet boundary), and, at the wanted
    steps (fixed Δt) or times (``dt: auto``), both fields for the density plots
    (``snapshots``) and, with ``keep_states``, the state that gives û again after a resume.
    Without a reference (None) it measures ‖û‖² alone (the scale divergence is judged
    by) and the error is NaN in the history, absent from the steps' metrics."""

    def __init__(self, cfg: RunConfig, compiled: Compiled, reference, weights, *, steps=(), times=(),
                 keep_states=False):
        self.cfg, self.compiled, self.reference, self.weights = cfg, compiled, reference, weights
        self.steps, self.times, self.keep_states = set(steps), {float(t) for t in times}, keep_states
        self.snapshots: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # time index -> (û, reference)

    def restore(self, run: RunState) -> None:
        """The snapshots of a resumed run, from the states its checkpoint kept."""
        for n, data in run.history.snapshot_states.items():
            u = self.compiled.evaluate(state_from_bytes(data, run.state), run.history.times[n])
            self.snapshots[n] = (np.asarray(u), self.reference_at(n, run.history))

    def reference_at(self, n: int, history: History) -> np.ndarray | None:
        if self.reference is None:
            return None
        if self.cfg.adaptive:
            return self.reference.values_at(float(history.times[n]), self.cfg.eval_grid)
        return self.reference.values(n, self.cfg.eval_grid)

    def __call__(self, n: int, state, run: RunState) -> float | None:
        """Measure at time index n (``state`` is the method's there): ``rel_l2`` (None
        without a reference)."""
        start, history = time.perf_counter(), run.history
        u = np.asarray(self.compiled.evaluate(state, history.times[n]))
        ref = self.reference_at(n, history)
        if (float(history.times[n]) in self.times) if self.cfg.adaptive else (n in self.steps):
            self.snapshots[n] = (u, ref)
            if self.keep_states:
                history.snapshot_states[n] = state_bytes(state)
        if ref is not None:
            history.err_sq[n], history.ref_sq[n] = squared_norms(u, ref, self.weights)
        else:
            history.err_sq[n], history.ref_sq[n] = np.nan, squared_norms(u, u, self.weights)[1]
        if self.compiled.boundary is not None:
            history.boundary[n] = float(np.max(np.abs(np.asarray(self.compiled.boundary(state, history.times[n])))))
        run.clock.eval_s += time.perf_counter() - start
        return None if ref is None else float(np.sqrt(history.err_sq[n] / history.ref_sq[n]))


class Recorder:
    """A run's checkpoints, into ``store`` (None: none): every ``every`` steps, at the
    end, and — whatever else ends the run (a divergence, a stop a signal asked for, a
    store that gave up, …) — its last good step, in :meth:`keeping` alone. A checkpoint
    that could not be written ends the run and is not tried again: the one before it
    stands."""

    def __init__(self, store: CheckpointStore | None, every: int | None, last: int | None, saved: int):
        self.store, self.every, self.last = store, every, last  # last: the run's last step, if known
        self.saved = saved  # the step of the checkpoint on disk (-1: none)

    def save(self, run: RunState) -> None:
        if self.store is not None and self.saved != run.n:
            if run.estimate is not None:
                run.history.est_vector = run.estimate.vector
            self.store.save(run.n, run.state, run.history.arrays(), run.info())
            self.saved = run.n

    def after_step(self, run: RunState) -> None:
        """The periodic checkpoint (not at a fixed-Δt run's last step: the end's is next)."""
        if self.every and run.n % self.every == 0 and run.n != self.last:
            self.save(run)

    @contextlib.contextmanager
    def keeping(self, run: RunState) -> Iterator[None]:
        """Save ``run``'s last good step when the block raises (a write that failed aside)."""
        try:
            yield
        except WriteFailed:
            raise
        except BaseException:
            with contextlib.suppress(Exception):  # else the previous checkpoint stands
                self.save(run)
            raise
