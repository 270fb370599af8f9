"""The frontier search: a Hydra sweeper (``hydra/sweeper=frontier``,
``conf/hydra/sweeper/frontier.yaml``) that asks an Optuna study for configurations
and launches each as an ordinary job through the configured launcher, until the
study holds ``n_trials`` trials (docs/frontier.md).

A trial is told from its MLflow run (:mod:`teng_eq.tracking.trials`): FINISHED with
both objectives finite: COMPLETE with ``(error, cost)``; FAILED because its numerics
broke down (diverged, overfit): PRUNED, stopped early, with the run's reason — Optuna's
TPE ranks pruned trials below every complete one and so moves away from them, where a
FAIL tells it nothing (measured: a search on Kuramoto–Sivashinsky asked for the same
diverging point 25 times running); FAILED otherwise (a job that raised): FAIL with its
reason. The search goes on either way. A new trial's job runs with ``resume=false``
(its own run, timed now, even where an equal configuration ran before); trial ``n`` is
job ``n`` (``multirun/…/n``, tag ``job_num``), tagged ``study`` and ``trial``.

**Stopped and started again.** A signal ends the running trial's job at the end of
a step (its run KILLED, its checkpoint kept) and the search with it; the trial stays
RUNNING in the study. The next invocation of the same command (same study) first
settles such trials: one whose run ended (FINISHED, FAILED) is told from it; one whose
run was stopped is launched again as the same job number with ``resume=true``, and
its job continues that run from its checkpoint; one that never opened a run is
launched afresh. So no trial is lost and none is run twice, and the study and
MLflow hold the same trials.

**Several searches on one study** (a shared storage: PostgreSQL, a journal file;
:mod:`teng_eq.search.study`): each asks its batches in turns, so together they hold
``n_trials`` trials, numbered without gaps or repeats. A RUNNING trial belongs to the
search that asked it (user attributes ``owner``: its process, and ``mlflow_parent``:
its parent run); it is an orphan, taken over (in a turn) and settled as above, only
when that search is gone: its parent run ended, or is stale (its process dead, or its
heartbeat old: :func:`~teng_eq.tracking.store.run_alive`).

The class is registered with Hydra from ``hydra_plugins.teng_eq_frontier`` (Hydra
loads plugins from that package only). A Hydra importer (its ``Sweeper`` API) that
runs in the launching process: it never loads JAX, and reads MLflow through
:mod:`teng_eq.tracking`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from teng_eq import interrupts
from teng_eq.errors import ConfigError, Diverged, Overfit
from teng_eq.search.space import Space, baseline_params, check_options, parse_space
from teng_eq.search.study import (
    bookkeeping_turn,
    cheapest,
    check_storage,
    default_storage,
    describe,
    front,
    is_shared,
    objective_values,
    open_study,
    reseed,
    study_lock,
    study_name,
)
from teng_eq.tracking import PARENT_RUN_ENV, default_tracking_uri, open_client, run_alive
from teng_eq.tracking.store import is_stale, process_tags
from teng_eq.tracking.sweep import config_root
from teng_eq.tracking.trials import STUDY_ENV, finished_twin, set_tags, study_runs, trial_run

log = logging.getLogger(__name__)
#: The ``failure_reason`` prefixes of a run whose numerics broke down: its trial is PRUNED.
BROKE_DOWN = tuple(f"{cls.__name__}:" for cls in (Diverged, Overfit))


@contextlib.contextmanager
def _deferred() -> Iterator[None]:
    """The study's bookkeeping as one piece: a signal during it waits until it is done."""
    interrupts.defer(True)
    try:
        yield
    finally:
        interrupts.defer(False)
    interrupts.check()


class FrontierSweeper(Sweeper):
    """Hydra sweeper: a multi-objective Optuna search over the axes in ``params``
    (and the command line's sweep overrides), minimising ``(error, cost)``; see the
    module's docstring and ``conf/hydra/sweeper/frontier.yaml`` for the keys."""

    def __init__(self, n_trials: int = 30, n_jobs: int = 1, sampler: str = "tpe", startup_trials: int = 10,
                 seed: int = 0, study: str | None = None, storage: str | None = None,
                 error: str = "global_rel_l2", cost: str = "runtime_s", target: float | None = None,
                 baseline: bool = True, params: dict | None = None):
        check_options(n_trials=n_trials, n_jobs=n_jobs, sampler=sampler, startup_trials=startup_trials,
                      error=error, cost=cost, target=target)
        self.n_trials, self.n_jobs, self.sampler = int(n_trials), int(n_jobs), str(sampler)
        self.startup_trials, self.seed = int(startup_trials), int(seed)
        self.study_name, self.storage = study, storage
        self.error, self.cost = str(error), str(cost)
        self.target = None if target is None else float(target)
        self.baseline = bool(baseline)
        self.params = dict(params or {})
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        cfg = self.config
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        space = parse_space(parser, self.params, arguments)
        root = config_root(cfg)
        uri = cfg.tracking_uri or default_tracking_uri(root)
        storage = self.storage or default_storage(uri, root)
        name = self.study_name or study_name(str(cfg.experiment_name), space, self.error, self.cost)
        sweep_dir = Path(cfg.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, sweep_dir / "multirun.yaml")
        interrupts.install()
        try:
            check_storage(storage)
            with study_lock(storage, name):
                study = open_study(storage, name, sampler=self.sampler, seed=self.seed,
                                   startup_trials=self.startup_trials)
                return _Search(self, study, space, uri, storage).run()
        except ConfigError as err:
            raise SystemExit(f"error: {err}") from None
        except interrupts.Interrupted as stop:  # between trials (a trial's job says so itself)
            print(f"error: stopped by {stop}: the same command continues study {name}", file=sys.stderr)
            raise SystemExit(stop.exit_code) from None


class _Search:
    """One invocation of a search: the orphans settled, new trials asked, launched
    and told, then the summary (and the target's answer) printed."""

    def __init__(self, sweeper: FrontierSweeper, study, space: Space, uri: str, storage: str):
        self.s, self.study, self.space, self.uri, self.storage = sweeper, study, space, uri, storage
        self.name = study.study_name
        self.client = open_client(uri)
        # the search's parent run (teng_eq.tracking.SweepCallback)
        self.parent = os.environ.get(PARENT_RUN_ENV)
        self.returns: list[Sequence[JobReturn]] = []

    # --- the loop -----------------------------------------------------------------

    def run(self) -> list[Sequence[JobReturn]]:
        os.environ[STUDY_ENV] = self.name
        try:
            if self.parent:
                with _deferred():
                    set_tags(self.client, self.parent, {"study": self.name, "study_storage": self.storage})
            held = len(self.study.get_trials(deepcopy=False))
            log.info("frontier search: study %s in %s holds %d of %d trials", self.name, self.storage, held,
                     self.s.n_trials)
            with _deferred(), bookkeeping_turn(self.storage, self.name):
                orphans = self._take_orphans()
            for orphan in orphans:
                self._settle_orphan(orphan)
            while True:
                with _deferred(), bookkeeping_turn(self.storage, self.name):
                    asked = self._ask_batch()
                if not asked:
                    break
                self._launch([t.number for t in asked], resume=False)
        finally:
            os.environ.pop(STUDY_ENV, None)
        self._report()
        return self.returns

    def _ask_batch(self) -> list:
        """The next batch (in this search's turn): up to ``n_jobs`` trials asked, none
        past the study's ``n_trials``; the baseline enqueued first in an empty study."""
        todo = self.s.n_trials - len(self.study.get_trials(deepcopy=False))
        if todo <= 0:
            return []
        if self.s.baseline and todo == self.s.n_trials:
            self._enqueue_baseline()
        if is_shared(self.storage):  # another search may have asked since: a seed of its own
            reseed(self.study, self.s.sampler, self.s.seed, self.s.startup_trials)
        return [self._ask() for _ in range(min(self.s.n_jobs, todo))]

    def _take_orphans(self) -> list:
        """The RUNNING trials no live search owns (in this search's turn), made this one's."""
        from optuna.trial import TrialState

        taken = []
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if self._orphaned(frozen):
                self._own(_live_trial(self.study, frozen))
                taken.append(frozen)
        return taken

    def _orphaned(self, frozen) -> bool:
        """Whether RUNNING trial ``frozen`` was left by a search that is gone. In SQLite
        every such trial is (one search at a time); in a shared storage, one whose parent
        run is this search's (reopened: an earlier invocation of this command), or ended,
        or stale; without a parent run, one whose process is gone."""
        if not is_shared(self.storage):
            return True
        parent = frozen.user_attrs.get("mlflow_parent")
        if parent and parent == self.parent:
            return True
        alive = run_alive(self.client, parent) if parent else None
        if alive is not None:
            return not alive
        owner = frozen.user_attrs.get("owner")
        return not isinstance(owner, dict) or is_stale(owner)

    def _own(self, trial) -> None:
        """Mark ``trial`` as this search's: its process (and parent run)."""
        trial.set_user_attr("owner", {k: v for k, v in process_tags().items() if k != "heartbeat"})
        if self.parent:
            trial.set_user_attr("mlflow_parent", self.parent)

    def _ask(self):
        trial = self.study.ask()
        params = {axis.name: _suggest(trial, axis) for axis in self.space.axes}
        trial.set_user_attr("overrides", self.space.overrides(params))
        self._own(trial)
        return trial

    def _overrides(self, frozen) -> list[str]:
        """A trial's overrides: as recorded when it was asked; else from its parameters."""
        return list(frozen.user_attrs.get("overrides") or self.space.overrides(frozen.params))

    def _enqueue_baseline(self) -> None:
        """The config's own values of the searched keys as trial 0: the run a search is
        measured against, timed in the same state of the machine."""
        cfg = self.s.config
        choices = cfg.hydra.runtime.choices
        values = {a.name: str(choices[a.name]) if a.name in choices else str(OmegaConf.select(cfg, a.name))
                  for a in self.space.axes}
        params, outside = baseline_params(self.space, values)
        if outside:
            log.warning("no baseline trial: the config's %s lies outside the search space",
                        ", ".join(outside))
            return
        self.study.enqueue_trial(params, user_attrs={"baseline": True}, skip_if_exists=True)

    # --- launching ----------------------------------------------------------------

    def _launch(self, numbers: list[int], *, resume: bool) -> None:
        """Launch trials ``numbers`` (consecutive: one batch, job ``n`` = trial ``n``) and
        tell each from its run. A job that refused its config (one line, no run)
        fails its trial; any other exit (a signal) settles what ended and stops."""
        trials = {t.number: t for t in self.study.get_trials(deepcopy=False) if t.number in numbers}
        batch = [[*self._overrides(trials[n]), f"resume={str(resume).lower()}"] for n in numbers]
        self.s.validate_batch_is_legal(batch)
        try:
            results = self.s.launcher.launch(batch, initial_job_idx=numbers[0])
        except SystemExit as stop:
            if (isinstance(stop.code, str) and len(numbers) == 1
                    and trial_run(self.client, self.name, numbers[0]) is None):
                self._settle(numbers[0], refused=stop.code)  # the job's one line: its config is bad
                return
            for n in numbers:
                self._settle(n)
            raise
        except BaseException:
            for n in numbers:
                self._settle(n)
            raise
        self.returns.append(results)
        for n, result in zip(numbers, results):
            self._settle(n, result=result)

    def _settle_orphan(self, frozen) -> None:
        """A trial an earlier invocation left RUNNING (it was stopped): told from its
        run if that ended, else launched again — resuming its run where there is one."""
        if any(axis.name not in frozen.params for axis in self.space.axes):  # stopped while being asked
            trial = _live_trial(self.study, frozen)
            for axis in self.space.axes:
                _suggest(trial, axis)
            frozen = self.study.get_trials(deepcopy=False)[frozen.number]
        run = trial_run(self.client, self.name, frozen.number)
        if run is not None and run.info.status in ("FINISHED", "FAILED"):
            self._settle(frozen.number)
            return
        what = f"its run {run.info.run_id} is {run.info.status}" if run is not None else "it opened no run"
        log.info("trial %d was left unfinished (%s): %s", frozen.number, what,
                 "resuming it" if run is not None else "starting it")
        self._launch([frozen.number], resume=run is not None)

    def _settle(self, number: int, *, result: JobReturn | None = None, refused: str | None = None) -> None:
        """Tell trial ``number`` from its run, if it ended; else leave it RUNNING (the
        next invocation settles it)."""
        from optuna.trial import TrialState

        with _deferred():
            frozen = self.study.get_trials(deepcopy=False)[number]
            if frozen.state != TrialState.RUNNING:
                return
            run = trial_run(self.client, self.name, number)
            values, why = None, ""
            if run is None:
                if refused is None and (result is None or result.status != JobStatus.FAILED):
                    return  # never started: launched again next time
                why = refused or f"its job opened no run: {_raised(result)}"
            else:
                status = run.info.status
                source = run
                if (status not in ("FINISHED", "FAILED") and result is not None
                        and result.status == JobStatus.COMPLETED):
                    # The job returned without writing its run: its configuration was FINISHED already.
                    source = finished_twin(self.client, run) or run
                    status = source.info.status
                if status == "FINISHED":
                    values, why = objective_values(source.data.metrics, (self.s.error, self.s.cost))
                elif status == "FAILED":
                    why = source.data.tags.get("failure_reason", "FAILED")
                else:
                    return  # stopped: resumed next time
            trial = _live_trial(self.study, frozen)
            if run is not None:
                trial.set_user_attr("mlflow_run_id", source.info.run_id)
            if values is None:
                trial.set_user_attr("failure_reason", why[:2000])
                broke_down = why.startswith(BROKE_DOWN)
                self.study.tell(number, state=TrialState.PRUNED if broke_down else TrialState.FAIL)
                log.warning("trial %d FAILED%s: %s", number, " (pruned)" if broke_down else "",
                            why.splitlines()[0][:300] if why else "")
            else:
                self.study.tell(number, values)
                log.info("trial %d: %s %.3e, %s %.4g (%s)", number, self.s.error, values[0], self.s.cost,
                         values[1], describe(frozen.params))

    # --- the answer ---------------------------------------------------------------

    def _report(self) -> None:
        """The study and MLflow side by side, the front, and the target's answer."""
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        states = {s.name: sum(t.state == s for t in trials) for s in TrialState}
        runs = study_runs(self.client, self.name)
        statuses = {s: sum(r.info.status == s for r in runs)
                    for s in ("FINISHED", "FAILED", "KILLED", "RUNNING")}
        e, c = self.s.error, self.s.cost
        print(f"study {self.name} ({self.storage}): {len(trials)} trials: "
              + ", ".join(f"{n} {s.lower()}" for s, n in states.items() if n))
        print(f"MLflow ({self.uri}): {len(runs)} trial runs: "
              + ", ".join(f"{n} {s}" for s, n in statuses.items() if n)
              + (f"; parent run {self.parent}" if self.parent else ""))
        best = front(self.study)
        if best:
            print(f"front ({len(best)} trial{'s' * (len(best) != 1)}, cheapest first):  "
                  f"trial  {e}  {c}  parameters")
            for t in best:
                print(f"  {t.number:4d}  {t.values[0]:.3e}  {t.values[1]:.4g}  {describe(t.params)}")
        if self.s.target is None:
            return
        chosen = cheapest(self.study, self.s.target)
        if chosen is None:
            done = [t for t in trials if t.state == TrialState.COMPLETE]
            closest = min(done, key=lambda t: t.values[0], default=None)
            near = (f"; the smallest {e} is {closest.values[0]:.3e} (trial {closest.number})"
                    if closest is not None else "")
            print(f"target {e} <= {self.s.target:g}: no trial reaches it{near}")
            tags = {"target": self.s.target, "target_trial": "none"}
        else:
            command = self.command(chosen)
            print(f"target {e} <= {self.s.target:g}: trial {chosen.number} is the cheapest that reaches it: "
                  f"{e} {chosen.values[0]:.3e}, {c} {chosen.values[1]:.4g} "
                  f"(run {chosen.user_attrs.get('mlflow_run_id', '?')}); to run it again:\n  {command}")
            tags = {"target": self.s.target, "target_trial": chosen.number, "target_command": command}
        if self.parent:
            set_tags(self.client, self.parent, tags)

    def command(self, trial) -> str:
        """The command line that runs ``trial``'s configuration again as one job:
        its overrides, as a single run (a preset may ask for a multirun), in a new run, with
        the search's own ``--config-dir`` (a user's folder)."""
        words = [*config_dir_words(sys.argv[1:]), *self._overrides(trial), "hydra.mode=RUN", "resume=false"]
        return " ".join(["python", shlex.quote(sys.argv[0]), *(shlex.quote(w) for w in words)])


def config_dir_words(argv: Sequence[str]) -> list[str]:
    """The words of ``argv`` that name Hydra's ``--config-dir`` (``-cd``), with their value."""
    words = []
    for i, word in enumerate(argv):
        if word in ("--config-dir", "-cd") and i + 1 < len(argv):
            words += [word, argv[i + 1]]
        elif word.startswith(("--config-dir=", "-cd=")):
            words.append(word)
    return words


def _raised(result: JobReturn) -> str:
    """What a FAILED job raised, in one line."""
    try:
        result.return_value  # noqa: B018 - raises the job's exception
    except Exception as exc:  # noqa: BLE001 - reported, not handled
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return "nothing"


def _suggest(trial, axis) -> Any:
    """Trial ``trial``'s value on ``axis`` (drawn now, or the one it holds)."""
    if axis.choices:
        return trial.suggest_categorical(axis.name, list(axis.choices))
    if axis.integer:
        return trial.suggest_int(axis.name, int(axis.low), int(axis.high), log=axis.log)
    return trial.suggest_float(axis.name, float(axis.low), float(axis.high), log=axis.log)


def _live_trial(study, frozen):
    """A writable handle on the RUNNING trial ``frozen`` (Optuna hands out handles only
    for trials it asks for; this one was asked by an earlier invocation, or earlier here)."""
    from optuna.trial import Trial

    return Trial(study, frozen._trial_id)
