"""What a run does on the side: every side effect of a run (logging, a progress display,
checkpoints, signals, a user's hook) is a :class:`Callback` in the one list the run is
given, called by :func:`teng_eq.run.loop.run` (and, for θ₀'s fit and other notes before the
steps, by :func:`teng_eq.run.simulation.run_simulation`).

A step's callbacks run in a named order, by their :attr:`Callback.stage`: every
``observe`` callback first (MLflow, the progress bar, the user's: they see the step),
then every ``save`` one (checkpoints: what was reported is what is kept), then every
``stop`` one (signals: a stop is raised once the step is logged and saved); within a
stage, in the order given. A plain function ``cb(record, state)`` is an ``observe``
callback of that one hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, ClassVar

from teng_eq.fit.results import StepRecord

if TYPE_CHECKING:
    from teng_eq.run.loop import RunState

#: The stages of a step's callbacks, in the order they run.
STAGES = ("observe", "save", "stop")


class Callback:
    """A run's side effect, by its hooks (each a no-op here):

    * ``note(item)``: what the run reports before its steps: θ₀'s fit chunk by chunk (a
      :class:`~teng_eq.fit.iterate.FitProgress`) and lines of text (a resume);
    * ``begin(state)``: once the loop starts, from the start or a checkpoint;
    * ``step(record, state)``: after each step (first the rows the state holds: the start,
      and on a resume the steps done); a true value stops the run there;
    * ``end(state)``: once the run is done (or a callback stopped it);
    * ``abort(state, error)``: when ``error`` ends the run early (a divergence, a signal, a
      callback's own exception), before it is raised on; ``state`` is the last good one
      (None: the run failed before its loop began, in θ₀'s fit say).
    """

    #: Where among a step's callbacks this one runs (:data:`STAGES`).
    stage: ClassVar[str] = "observe"

    def note(self, item) -> None:
        """θ₀'s fit progress or a line of text, before the steps."""

    def begin(self, state: RunState) -> None:
        """The loop starts at ``state``."""

    def step(self, record: StepRecord, state: RunState) -> bool | None:
        """Step ``record.step`` is done; ``state`` is the run after it. True: stop here."""
        return None

    def end(self, state: RunState) -> None:
        """The run is done at ``state``."""

    def abort(self, state: RunState, error: BaseException) -> None:
        """``error`` ends the run at ``state``, its last good step."""


@dataclasses.dataclass(frozen=True)
class OnStep(Callback):
    """``fn(record, state)`` as the ``step`` hook of an ``observe`` callback; with
    ``record_only``, ``fn(record)`` (what it returns does not stop the run)."""

    fn: Callable
    record_only: bool = False

    def step(self, record: StepRecord, state: RunState) -> bool | None:
        if self.record_only:
            self.fn(record)
            return None
        return self.fn(record, state)


def ordered(callbacks: Iterable[Callback | Callable]) -> tuple[Callback, ...]:
    """``callbacks`` as :class:`Callback` s (a function: :class:`OnStep`), by :data:`STAGES`,
    in their given order within a stage."""
    hooks = [cb if isinstance(cb, Callback) else OnStep(cb) for cb in callbacks]
    for cb in hooks:
        if cb.stage not in STAGES:
            raise ValueError(f"callback {cb!r}: stage {cb.stage!r} is not one of {STAGES}")
    return tuple(sorted(hooks, key=lambda cb: STAGES.index(cb.stage)))
