"""What a person sees while a job runs (:class:`Progress`): a callback of the run
(:class:`~teng_eq.run.callbacks.Callback`) that draws progress bars on stderr."""

from __future__ import annotations

import sys

from tqdm import tqdm

from teng_eq.fit.iterate import FitProgress
from teng_eq.fit.results import StepRecord
from teng_eq.run.callbacks import Callback


class Progress(Callback):
    """What a person sees while a job runs, on stderr: a bar for each θ₀ fit stage
    (iterations, loss, the target it is judged by), then one for the time steps
    (step, ``rel_l2``, ``step_loss``); other lines (the library's, the log's) are
    written above the bars instead of through them. ``enabled=False``: nothing. The bars
    are the one state it keeps, as a display does."""

    def __init__(self, enabled: bool, name: str):
        self.enabled, self.name = enabled, name
        self._fit: tqdm | None = None
        self._fit_stage: str | None = None
        self._steps: tqdm | None = None

    def note(self, message) -> None:
        """θ₀'s fit progress (a bar per stage) or a line of text."""
        if not self.enabled:
            return
        if isinstance(message, FitProgress):
            self._fit_update(message)
        else:
            self._fit_close()
            tqdm.write(str(message), file=sys.stderr)

    def _fit_update(self, p: FitProgress) -> None:
        if p.stage != self._fit_stage:
            self._fit_close()
            # Started at the first report (its chunk included compilation): the rate counts the rest.
            self._fit = tqdm(total=p.max_iters, initial=p.iteration, desc=p.stage, unit="it", file=sys.stderr,
                             dynamic_ncols=True)
            self._fit_stage = p.stage
        self._fit.update(p.iteration - self._fit.n)
        target = f" target={p.target:.1e}" if p.target is not None else ""
        self._fit.set_postfix_str(f"loss={p.loss:.2e}{target}")

    def _fit_close(self) -> None:
        if self._fit is not None:
            self._fit.total = self._fit.n  # a stage ends at its tolerance or plateau, seldom at its cap
            self._fit.close()
            self._fit, self._fit_stage = None, None

    def step(self, rec: StepRecord, state) -> None:
        if not self.enabled:
            return
        self._fit_close()
        if self._steps is None:
            self._steps = tqdm(total=rec.of, desc=self.name, unit="step", file=sys.stderr, dynamic_ncols=True)
        if rec.step == 1:
            self._steps.reset(total=rec.of)  # the rate counts steps, not compilation (None: dt=auto)
        if rec.step > 0:
            shown = {k: rec.metrics[k] for k in ("t", "dt", "rel_l2", "est_rel_l2", "step_loss")
                     if k in rec.metrics}
            self._steps.set_postfix_str(" ".join(f"{k}={v:.2e}" for k, v in shown.items()), refresh=False)
            self._steps.update(rec.step - self._steps.n)

    def end(self, state) -> None:
        self.close()

    def abort(self, state, error: BaseException) -> None:
        self.close()

    def close(self) -> None:
        self._fit_close()
        if self._steps is not None:
            self._steps.close()
            self._steps = None
