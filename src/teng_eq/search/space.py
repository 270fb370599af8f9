"""A search space in Hydra's override grammar, as Optuna distributions.

Every axis is one config key (or config group) and a sweep expression:

==============================  ==========================================  =============================
override                        Optuna distribution                         values the preflight checks
==============================  ==========================================  =============================
``dt=0.0025,0.005,0.01``        categorical over the written values         every value
``method=choice(teng_heun,…)``  the same                                    every value
``iters=range(2,8)``            integers 2 … 7 (Hydra's stop is exclusive)  all (up to 8), else ends + middle
``subsample=tag(log,range(64,1025))``  integers 64 … 1024, drawn on a log scale  ends + middle
``controller.rtol=tag(log,interval(1e-7,1e-4))``  floats, log scale (``log``)  ends + middle
``x=tag(int,interval(2,9))``    integers 2 … 9                              as ``range``
==============================  ==========================================  =============================

A plain ``key=value`` fixes that key in every trial. Categorical values are kept as
the strings written, so that a trial's override reproduces exactly what was typed.
The checks here are of the space itself (bounds, types); whether a value suits the
config is the preflight's question (:func:`teng_eq.jobs.preflight.preflight`), asked of
the points :meth:`Axis.checked_values` names, before any compute.

A Hydra importer (its override parser), written for the frontier sweeper
(:mod:`teng_eq.search.sweeper`) and the preflight; Optuna is imported on first use."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.errors import HydraException

from teng_eq.errors import ConfigError

#: Integer ranges up to this many values are checked whole by the preflight.
_CHECK_ALL = 8

#: ``hydra.sweeper._target_`` of the frontier search (conf/hydra/sweeper/frontier.yaml): Hydra
#: takes plugins from ``hydra_plugins`` only.
SWEEPER_TARGET = "hydra_plugins.teng_eq_frontier.frontier_sweeper.FrontierSweeper"

#: Samplers by name: multi-objective TPE (the default: it models the front after
#: ``startup_trials`` random ones), NSGA-II (``startup_trials`` is its population), random.
SAMPLERS = ("tpe", "nsga2", "random")

#: End-of-run metrics (DESIGN.md) a search can minimise: the error, and the cost.
ERRORS = ("global_rel_l2", "final_rel_l2", "est_global_rel_l2")
COSTS = ("runtime_s", "job_s", "iterations_total")


@dataclasses.dataclass(frozen=True)
class Axis:
    """One searched key: ``key`` as typed (with a ``+`` or ``++`` prefix where it adds
    a key), and either ``choices`` (strings) or numeric bounds ``low``..``high``
    (``integer``: whole numbers, ``log``: drawn on a log scale)."""

    key: str
    choices: tuple[str, ...] = ()
    low: float | int | None = None
    high: float | int | None = None
    integer: bool = False
    log: bool = False

    @property
    def name(self) -> str:
        """The parameter's name in the study: the key without its prefix."""
        return self.key.lstrip("+~")

    def distribution(self):
        """The Optuna distribution of this axis."""
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.choices:
            return CategoricalDistribution(list(self.choices))
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(float(self.low), float(self.high), log=self.log)

    def override(self, value: Any) -> str:
        """``key=value`` for a value drawn from this axis (``repr`` of a float: exact)."""
        if self.choices:
            return f"{self.key}={value}"
        return f"{self.key}={int(value)}" if self.integer else f"{self.key}={float(value)!r}"

    def checked_values(self) -> list[str]:
        """The values the preflight composes and validates: every choice; the two ends
        of a range and its middle (geometric on a log scale), all of a short integer range."""
        if self.choices:
            return list(self.choices)
        if self.integer and self.high - self.low < _CHECK_ALL:
            return [str(v) for v in range(int(self.low), int(self.high) + 1)]
        mid = math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2
        if self.integer:
            return [str(int(v)) for v in dict.fromkeys((self.low, round(mid), self.high))]
        return [repr(float(v)) for v in (self.low, mid, self.high)]

    def contains(self, text: str) -> bool:
        """Whether the config value ``text`` (as a string) is a point of this axis."""
        if self.choices:
            return text in self.choices or any(_same_number(text, c) for c in self.choices)
        try:
            value = float(text)
        except ValueError:
            return False
        return self.low <= value <= self.high and (not self.integer or value == int(value))

    def param(self, text: str) -> Any:
        """The study's parameter value for the config value ``text`` (:meth:`contains`)."""
        if self.choices:
            return next((c for c in self.choices if c == text or _same_number(text, c)), text)
        return int(float(text)) if self.integer else float(text)


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False


@dataclasses.dataclass(frozen=True)
class Space:
    """The axes of a search and the overrides every trial carries (``fixed``)."""

    axes: tuple[Axis, ...]
    fixed: tuple[str, ...]

    def distributions(self) -> dict:
        return {axis.name: axis.distribution() for axis in self.axes}

    def overrides(self, params: Mapping[str, Any]) -> list[str]:
        """A trial's overrides: the fixed ones, then one per axis from ``params``."""
        return [*self.fixed, *(axis.override(params[axis.name]) for axis in self.axes)]

    def describe(self) -> dict:
        """A plain description (what names the study by default)."""
        return {"axes": [dataclasses.asdict(a) for a in self.axes], "fixed": list(self.fixed)}

    def check_points(self) -> list[list[str]]:
        """The jobs the preflight validates: job ``i`` takes the ``i``-th checked value of
        every axis (an axis with fewer starts over), so that each value is checked once
        in as many jobs as the longest axis has values (composing a job is what costs);
        job 0 is the corner of every axis's first value, and one more the corner of the
        last values (the most iterations with the largest subsample and the smallest Δt)."""
        values = [a.checked_values() for a in self.axes]
        points = [[v[i % len(v)] for v in values] for i in range(max(map(len, values)))]
        if [v[-1] for v in values] not in points:
            points.append([v[-1] for v in values])
        return [[*self.fixed, *(f"{a.key}={v}" for a, v in zip(self.axes, point))] for point in points]


def _bad(line: str, why: str):
    raise ConfigError(f"invalid config: search space {line}: {why}")


def axis_of(override: Override) -> Axis:
    """The :class:`Axis` of a sweep override; a one-line :class:`ConfigError` when it
    cannot be searched."""
    key, value, line = override.get_key_element(), override.value(), override.input_line
    if "@" in key or key.startswith("~"):
        _bad(line, "search a plain key or config group")
    if isinstance(value, ChoiceSweep) or override.is_choice_sweep():
        choices = tuple(dict.fromkeys(override.sweep_string_iterator()))
        if len(choices) < 2:
            _bad(line, "a choice needs at least two values")
        return Axis(key=key, choices=choices)
    tags = set(getattr(value, "tags", set()))
    unknown = tags - {"log", "int"}
    if unknown:
        _bad(line, f"unknown tag {min(unknown)!r} (known: log, int)")
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if all(isinstance(v, int) for v in (start, stop, step)):
            if step != 1 and "log" in tags:
                _bad(line, "a log-scale range steps by 1")
            if step != 1:  # a stepped integer range: its values, as choices
                return _choices_or_bad(key, override, line)
            if stop - 1 <= start:
                _bad(line, "the range holds fewer than two values (its stop is exclusive)")
            return _numeric(key, line, start, stop - 1, integer=True, log="log" in tags)
        return _choices_or_bad(key, override, line)  # a float range: its values
    if isinstance(value, IntervalSweep):
        low, high = value.start, value.end
        if "int" in tags:
            low, high = math.ceil(low), math.floor(high)
        return _numeric(key, line, low, high, integer="int" in tags, log="log" in tags)
    _bad(line, "not a choice, range or interval")


def _choices_or_bad(key: str, override: Override, line: str) -> Axis:
    choices = tuple(dict.fromkeys(override.sweep_string_iterator()))
    if len(choices) < 2:
        _bad(line, "the range holds fewer than two values")
    return Axis(key=key, choices=choices)


def _numeric(key: str, line: str, low, high, *, integer: bool, log: bool) -> Axis:
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        _bad(line, f"needs low < high (got {low} and {high})")
    if log and low <= 0:
        _bad(line, f"a log scale needs low > 0 (got {low})")
    return Axis(key=key, low=low, high=high, integer=integer, log=log)


def parse_space(parser: OverridesParser, params: Mapping[str, Any] | None, arguments: Iterable[str]) -> Space:
    """The space of a search: the sweeper's ``params`` (``{key: expression}``, a
    preset's), then the command line's ``arguments``; a key given twice takes its
    last expression, and a plain value fixes the key. One-line :class:`ConfigError`
    for an expression that is not a search axis, or a search with no axis."""
    lines = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    try:
        parsed = parser.parse_overrides(lines)
    except HydraException as err:
        raise ConfigError(f"invalid config: search space: {_first_line(err)}") from None
    axes: dict[str, Axis] = {}
    fixed: list[tuple[str, str]] = []
    for override in parsed:
        key = override.get_key_element().lstrip("+~")
        # The last one wins, in its own place; a `+key=…` that adds the key stays (before it).
        axes.pop(key, None)
        fixed = [(k, line) for k, line in fixed if k != key or line.startswith("+")]
        if not override.is_sweep_override():
            fixed.append((key, override.input_line))
            continue
        try:
            axes[key] = axis_of(override)
        except HydraException as err:  # a glob without the config loader to expand it
            _bad(override.input_line, _first_line(err))
    if not axes:
        raise ConfigError("invalid config: the frontier search has no axis to search: give one as "
                          "key=choice(…)/range(…)/interval(…) or in hydra.sweeper.params")
    return Space(axes=tuple(axes.values()), fixed=tuple(line for _, line in fixed))


def _first_line(err: Exception) -> str:
    return next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)


def baseline_params(space: Space, values: Mapping[str, str]) -> tuple[dict, list[str]]:
    """The study's parameters for the config's own values (``values``: ``{axis name:
    value as a string}``): the run a search is measured against. Also the axes whose
    value lies outside the space (then there is no such trial)."""
    params, outside = {}, []
    for axis in space.axes:
        text = values.get(axis.name)
        if text is None or not axis.contains(text):
            outside.append(f"{axis.name}={text}")
        else:
            params[axis.name] = axis.param(text)
    return params, outside


def check_options(*, n_trials, n_jobs, sampler, startup_trials, error, cost, target) -> None:
    """The frontier sweeper's own keys (``hydra.sweeper.*``): one line for a bad one."""
    for key, value, least in (("n_trials", n_trials, 1), ("n_jobs", n_jobs, 1),
                              ("startup_trials", startup_trials, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            _bad_option(key, value, f"must be a whole number >= {least}")
    if sampler not in SAMPLERS:
        _bad_option("sampler", sampler, f"choose one of {', '.join(SAMPLERS)}")
    if error not in ERRORS:
        _bad_option("error", error, f"an error metric a search can minimise: {', '.join(ERRORS)}")
    if cost not in COSTS:
        _bad_option("cost", cost, f"a cost metric a search can minimise: {', '.join(COSTS)}")
    if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                               or not 0 < target < math.inf):
        _bad_option("target", target, "an error to reach, > 0 (or null: no target)")


def _bad_option(key: str, value, why: str):
    raise ConfigError(f"invalid config: hydra.sweeper.{key}={value!r}: {why}", key, value, why)
