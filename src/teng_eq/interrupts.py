"""Signals that stop a run: SIGTERM (SLURM at a time limit or on preemption,
``timeout``, ``docker stop``, ``kill``), SIGINT (Ctrl-C), and under submitit its
preemption signal (SIGUSR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise).

:func:`install` replaces their handlers in the main thread. A signal raises
:class:`Interrupted` (a ``KeyboardInterrupt``, so that nothing on the way
mistakes it for an error of the run) — at once, or, after :func:`defer`
(while a run steps), at the next :func:`check` (the end of a step), so that the
run can keep the step it finished in its checkpoint. A second signal while one is
pending raises at once: whoever sends two means now.

The state is per process and read by the sweep callback (:func:`received`), which
ends a multirun's parent run KILLED with the signal when one stopped it. A
handler that was there before (submitit's requeue on preemption) is called once
the run is saved (:func:`chain`).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

#: Signals handled everywhere.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """A run stopped by signal ``signum``; ``where`` says how far it got (set by
    whoever knows: the job, e.g. ``after step 12 of 20``)."""

    def __init__(self, signum: int, where: str = ""):
        super().__init__(signum)
        self.signum, self.where = signum, where

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum

    def __str__(self) -> str:
        return f"{self.name} (signal {self.signum})" + (f" {self.where}" if self.where else "")


_first: Interrupted | None = None  # the first stop of this process (for the sweep callback)
_pending: Interrupted | None = None  # a stop that waits for the end of the current step
_deferring = False
_previous: dict[int, Callable] = {}  # signum -> a Python handler installed before ours


def _handle(signum: int, frame) -> None:
    global _first, _pending
    stop = Interrupted(signum)
    _first = _first or stop
    if _deferring and _pending is None:
        _pending = stop  # raised by check() at the end of the current step
        return
    _pending = None
    raise stop


def preemption_signal() -> int | None:
    """submitit's preemption signal when this process is a submitit job whose
    handler for it is installed (it requeues the job), else None."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    signum = getattr(signal, name, None)
    if signum is None or not callable(signal.getsignal(signum)):
        return None
    return signum


def install() -> None:
    """Handle :data:`STOP_SIGNALS` (and submitit's preemption signal, chaining to
    its handler) in this process. Only the main thread may install handlers;
    elsewhere (a launcher's worker thread) nothing is changed. Idempotent."""
    if threading.current_thread() is not threading.main_thread():
        return
    wanted = [*STOP_SIGNALS]
    preempt = preemption_signal()
    if preempt is not None:
        wanted.append(preempt)
    for signum in wanted:
        current = signal.getsignal(signum)
        if current is _handle:
            continue
        if callable(current) and current is not signal.default_int_handler:
            _previous[signum] = current
        signal.signal(signum, _handle)


def defer(on: bool = True) -> None:
    """From now on (``on``) a first signal only marks the stop as pending and
    :func:`check` raises it (while a run steps: at the end of each step); off,
    signals raise at once again (a stop still pending stays so for :func:`check`)."""
    global _deferring
    _deferring = on


def check() -> None:
    """Raise the pending :class:`Interrupted`, if any."""
    global _pending
    stop, _pending = _pending, None
    if stop is not None:
        raise stop


def received() -> Interrupted | None:
    """The first signal that stopped something in this process, if any."""
    return _first


def chained(stop: Interrupted) -> bool:
    """Whether :func:`chain` hands ``stop`` on to a handler installed before ours."""
    return stop.signum in _previous


def chain(stop: Interrupted) -> None:
    """Call the handler that was installed for ``stop.signum`` before ours, if
    any: under submitit, the one that requeues the job (it exits the process)."""
    previous = _previous.get(stop.signum)
    if previous is not None:
        previous(stop.signum, None)
