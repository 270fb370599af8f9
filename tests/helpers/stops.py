"""A run stopped in-process after a step it reported, as a signal or a store that gave
up stops one: the driver has saved that step first (where it checkpoints), so the run
resumes from it."""

from __future__ import annotations

from collections.abc import Callable


class Stop(Exception):
    """Stands for a stop after a step was reported (a signal, a kill, a store that gave up)."""


def stop_at(step: int) -> Callable:
    """An ``on_step`` callback that raises :class:`Stop` when step ``step`` is reported."""

    def on_step(record) -> None:
        if record.step == step:
            raise Stop

    return on_step
