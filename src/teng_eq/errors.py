"""What can go wrong, at the bottom of the library: a bad configuration value
(:class:`ConfigError`, raised by :func:`bad` with the one line every bad key gets,
before any compute) and a run that computed but must not count (:class:`RunFailed`:
:class:`Diverged`, :class:`Overfit`, :class:`WriteFailed`)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key (also held as
    ``key``, ``value``, ``why``: the config layer names a key as typed, :meth:`renamed`)."""

    def __init__(self, message: str, key: str | None = None, value=None, why: str = ""):
        super().__init__(message)
        self.key, self.value, self.why = key, value, why

    def renamed(self, key: str) -> ConfigError:
        """The same error about ``key``."""
        return ConfigError(f"invalid config: {key}={self.value!r}: {self.why}", key, self.value, self.why)


def bad(key: str, value, why: str) -> ConfigError:
    """The one-line :class:`ConfigError` for ``key=value``, to raise: ``raise bad(…)``."""
    return ConfigError(f"invalid config: {key}={value!r}: {why}", key, value, why)


class RunFailed(RuntimeError):
    """A run that computed but must not count: its MLflow run ends FAILED with the
    reason and :attr:`tags`; the other jobs of a sweep go on."""

    @property
    def tags(self) -> dict[str, str]:
        return {}


class Diverged(RunFailed, FloatingPointError):
    """A run stopped at ``step`` because a value was non-finite or its loss blew up;
    ``last_good_step`` is the step before it."""

    def __init__(self, message: str, step: int, last_good_step: int):
        super().__init__(message)
        self.step, self.last_good_step = step, last_good_step

    @property
    def tags(self) -> dict[str, str]:
        return {"diverged_at_step": str(self.step), "last_good_step": str(self.last_good_step)}


class Overfit(RunFailed):
    """A finished run whose fits overfit the quadrature nodes: some step's held-out
    loss exceeds its training loss more than ``holdout.fail`` times."""

    @property
    def tags(self) -> dict[str, str]:
        return {"holdout_flag": "fail"}


class WriteFailed(RunFailed):
    """A file the run must keep (its checkpoint, an artifact) could not be written:
    a full disk, a folder gone or read-only. The previous checkpoint is intact
    (writes are atomic), so running the same command again resumes from it."""
