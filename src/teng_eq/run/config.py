"""Run configuration: plain values, checked before any compute starts.

The pipeline (Hydra) composes ``conf/`` (the one source of defaults: nothing here
has one) and hands the resolved mapping to :meth:`RunConfig.from_mapping`; every
bad value raises :class:`~teng_eq.errors.ConfigError`, one line naming key and value.

The ``equation`` and ``method`` groups name the class that implements them (``impl:
module:Class``), which turns the rest of its group into a validated object
(:meth:`teng_eq.equations.Equation.from_config`, ``Method.Options``): adding an
equation or a method is one module and one yaml, with no dispatch on names.

A method group takes what it uses from the top level by interpolation (TENG's yaml
reads ``iters: ${iters}``, so ``iters=5`` reaches it): those keys (:data:`SHORTHANDS`)
are checked as the method's options, under the name the user typed (``rename``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from teng_eq.config.options import import_impl, one_of, options_from, typed
from teng_eq.equations import Equation, build_equation
from teng_eq.errors import ConfigError, bad
from teng_eq.estimate.defect import KINDS
from teng_eq.fit.mesh import check_devices
from teng_eq.methods.base import Method, Problem
from teng_eq.run.controller import Controller

#: ``reference``: ``auto`` measures the error against the equation's reference where it has
#: one; ``none`` never does (the run's estimate alone); ``required`` refuses an equation
#: without one.
REFERENCES = ("auto", "none", "required")

#: Top-level keys that only feed method groups (by interpolation): short to type in
#: a sweep (``iters=5,7``), meaningful only to a method whose yaml reads them.
SHORTHANDS = frozenset({"iters", "iters_later", "subsample_first", "subsample", "solver", "damping",
                        "warm_start", "grid", "stopping", "holdout", "network", "fit"})


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """The ``method`` group: its ``name`` (e.g. ``teng_heun``), the class that
    implements it, and that class's validated ``Options``."""

    name: str
    impl: str
    options: Any

    @property
    def cls(self) -> type[Method]:
        return import_impl(self.impl, "method.impl")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One job's numerics: the equation, the method (with its own options), time
    step (None: ``dt: auto``, chosen by the ``controller``) and horizon, the
    error-evaluation grid, the seed, the kind of a-posteriori error ``estimate``
    (:mod:`teng_eq.estimate.defect`), whether the error is also measured against a
    ``reference`` (:data:`REFERENCES`), and the local ``devices`` the fits' points are split
    over (1, N or ``"all"``: :mod:`teng_eq.fit.mesh`)."""

    equation: Equation
    method: MethodConfig
    dt: float | None
    t_final: float
    eval_grid: int
    seed: int
    controller: Controller
    estimate: str
    reference: str
    devices: int | str = 1

    #: The top-level keys of the run proper (``equation`` and ``method`` aside).
    KEYS = ("dt", "t_final", "eval_grid", "seed", "controller", "estimate", "reference", "devices")
    #: Those a mapping may leave out, with the value they then take.
    OPTIONAL: ClassVar[dict[str, object]] = {"devices": 1}

    @property
    def has_reference(self) -> bool:
        """Whether the run measures its error against the equation's reference."""
        return self.reference != "none" and self.equation.reference_scheme() is not None

    @property
    def problem(self) -> Problem:
        return Problem(equation=self.equation, dt=self.dt, t_final=self.t_final, seed=self.seed,
                       devices=self.devices)

    @property
    def adaptive(self) -> bool:
        """``dt: auto``: the step-size controller chooses every Δt."""
        return self.dt is None

    @property
    def n_steps(self) -> int | None:
        """Steps of a fixed-Δt run; None with ``dt: auto`` (the controller decides)."""
        return self.problem.n_steps

    @classmethod
    def from_mapping(cls, cfg: Mapping, rename: Callable[[str], str] | None = None) -> RunConfig:
        """Build from the pipeline's resolved mapping (keys of ``conf/``) and validate.
        ``rename`` names a key by the one it was interpolated from (an error in
        ``method.iters`` is one in ``iters``: :func:`teng_eq.jobs.preflight.key_namer`)."""
        try:
            return cls._from_mapping(cfg)
        except ConfigError as err:
            if rename is not None and err.key and rename(err.key) != err.key:
                raise err.renamed(rename(err.key)) from None
            raise

    @classmethod
    def _from_mapping(cls, cfg: Mapping) -> RunConfig:
        for group in ("equation", "method"):
            if not isinstance(cfg.get(group), Mapping):
                raise bad(group, cfg.get(group), "must be a config group (a mapping)")
        equation = build_equation(cfg["equation"])
        m = dict(cfg["method"])
        impl, name = m.pop("impl", None), m.pop("name", None)
        if not isinstance(name, str):
            raise bad("method.name", name, "must be a string")
        options = options_from(import_impl(impl, "method.impl").Options, m, "method")
        kw = {}
        for key in cls.KEYS:
            if key not in cfg and key not in cls.OPTIONAL:
                raise bad(key, None, "missing")
        kw["dt"] = None if cfg["dt"] == "auto" else typed(cfg["dt"], float, "dt")
        for key, kind in (("t_final", float), ("eval_grid", int), ("seed", int), ("estimate", str),
                          ("reference", str)):
            kw[key] = typed(cfg[key], kind, key)
        kw["controller"] = options_from(Controller, cfg["controller"], "controller")
        kw["devices"] = check_devices(cfg.get("devices", cls.OPTIONAL["devices"]))
        run = cls(equation=equation, method=MethodConfig(name=name, impl=impl, options=options), **kw)
        run.validate()
        return run

    def validate(self) -> None:
        """Cross-key checks; the method's own (``Method.check``) come last."""
        one_of("estimate", self.estimate, KINDS)
        one_of("reference", self.reference, REFERENCES)
        if self.reference == "required" and self.equation.reference_scheme() is None:
            raise bad("reference", self.reference,
                      f"equation {self.equation.name} has none (no reference_scheme, "
                      "no closed-form solution): reference=auto runs it on its error estimate alone")
        estimates = self.estimate != "none" and self.method.cls.defect is not Method.defect
        if not (self.has_reference or estimates):
            raise bad("estimate", self.estimate,
                      f"equation {self.equation.name} has no reference, so the run's "
                      f"error estimate is its only error measure, and method {self.method.name} with "
                      f"estimate={self.estimate} has none")
        if self.estimate == "embedded" and not self.method.cls.error_order(self.method.options):
            raise bad("estimate", self.estimate, f"method {self.method.name} has no embedded error estimate")
        if self.adaptive:
            if not self.t_final > 0:
                raise bad("t_final", self.t_final, "must be > 0")
            if not self.method.cls.error_order(self.method.options):
                raise bad("dt", "auto", f"method {self.method.name} has no embedded error estimate for the "
                    "step-size controller (TENG with integrator heun, bs3 or rk4 has)")
        else:
            if not self.dt > 0:
                raise bad("dt", self.dt, "must be > 0 (or auto)")
            if not self.t_final >= self.dt:
                raise bad("t_final", self.t_final, f"must be >= dt={self.dt}")
            if abs(self.n_steps * self.dt - self.t_final) > 1e-9 * self.t_final:
                raise bad("t_final", self.t_final, f"must be a whole number of steps of dt={self.dt}")
        if self.eval_grid < 8:
            raise bad("eval_grid", self.eval_grid, "must be an integer >= 8")
        if self.seed < 0:
            raise bad("seed", self.seed, "must be an integer >= 0")
        eq = self.equation
        if eq.components and not self.method.cls.systems:
            raise bad("method", self.method.name,
                      f"runs scalar equations, and {eq.name} is a system {eq.components} "
                      "(the explicit TENG methods run systems)")
        if self.devices != 1 and not self.method.cls.shards:
            raise bad("devices", self.devices, f"method {self.method.name} runs on one device (its own "
                      "solver); devices > 1 splits the points of TENG's least squares (the teng_* methods)")
        if (getattr(getattr(self.method.options, "network", None), "kind", None) == "multistage"
                and eq.domain.imposition() is not None):
            raise bad("network.kind", "multistage", "sums networks fitted to residuals, which Dirichlet "
                      "data imposed exactly (equation.enforce=exact) would multiply whole: take "
                      "equation.enforce=rows")
        self.method.cls.check(self.method.options, self.problem, self.method.name)
