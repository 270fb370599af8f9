"""Config groups as validated, frozen dataclasses: the helpers every module that owns
settings uses (an equation's fields, a method's ``Options``, the network, θ₀'s fit, …), so
that each owner declares and checks its own keys (:func:`options_from`, :func:`typed`,
:func:`at_least`, :func:`one_of`), and the bookkeeping keys (:data:`BOOKKEEPING`).

Nothing here imports JAX: the sweep callback and ``analyze.py`` read
:data:`BOOKKEEPING` without loading the numerics."""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import typing
from collections.abc import Mapping

from teng_eq.errors import bad

#: Top-level keys that say where results go and how a job is run, not what it
#: computes: left out of a run's ``config_hash`` (so a resumed or re-checkpointed
#: run is the same run) and never an axis of comparison between runs.
BOOKKEEPING = frozenset({"tracking_uri", "experiment_name", "cache_dir", "progress",
                         "checkpoint_every", "resume", "divergence_factor", "divergence_error",
                         "store_retry_s"})


def options_from(cls: type, mapping: Mapping, prefix: str):
    """The frozen dataclass ``cls`` built from ``mapping``: unknown keys, missing
    keys and values of the wrong type are :class:`~teng_eq.errors.ConfigError` s
    named ``<prefix>.<key>``; a field whose type is itself a dataclass is built
    from its sub-mapping the same way; ``cls.validate(prefix)`` (if any) checks
    the values."""
    if not isinstance(mapping, Mapping):
        raise bad(prefix, mapping, "must be a config group (a mapping)")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)

    def named(key: str) -> str:
        return f"{prefix}.{key}" if prefix else key

    for key in mapping:
        if key not in fields:
            raise bad(named(key), mapping[key], f"unknown key; known: {sorted(fields)}")
    kw = {}
    for name, field in fields.items():
        if name not in mapping:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise bad(named(name), None, "missing")
            continue
        kw[name] = typed(mapping[name], hints[name], named(name))
    obj = cls(**kw)
    if hasattr(obj, "validate"):
        obj.validate(prefix)
    return obj


def typed(value, tp, key: str):
    """``value`` checked against a simple type (``int``, ``float``, ``bool``, ``str``,
    ``tuple[float, ...]``, an options dataclass, any of them ``| None``), or a union of
    options dataclasses told apart by ``kind`` (:func:`tagged`)."""
    args = typing.get_args(tp)
    if set(args) == {float, str}:  # a number or a word (``auto``), which the options check
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (
            typed(value, str, key))
    if len(args) > 1 and all(dataclasses.is_dataclass(a) for a in args):
        return tagged(value, args, key)
    optional = type(None) in args
    if optional:
        tp = next(a for a in args if a is not type(None))
    if value is None:
        if optional:
            return None
        raise bad(key, value, f"must be {getattr(tp, '__name__', tp)}")
    if dataclasses.is_dataclass(tp):
        return options_from(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise bad(key, value, "must be true or false")
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(key, value, "must be an integer")
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(key, value, "must be a number")
        value = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise bad(key, value, "must be a string")
    elif typing.get_origin(tp) is tuple:
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        ):
            raise bad(key, value, "must be a list of numbers")
        value = tuple(float(v) for v in value)
    return value


def tagged(mapping, classes: tuple[type, ...], prefix: str):
    """One of the options dataclasses ``classes``, chosen by the mapping's ``kind`` (each
    class's ``KIND``; the first where the mapping has none, so that the first kind's group can
    leave the key out), built by :func:`options_from`. A class without a ``kind`` field gets the
    mapping without it."""
    if not isinstance(mapping, Mapping):
        raise bad(prefix, mapping, "must be a config group (a mapping)")
    kinds = {cls.KIND: cls for cls in classes}
    kind = mapping.get("kind", classes[0].KIND)
    if kind not in kinds:
        raise bad(f"{prefix}.kind", kind, f"unknown, choose one of {list(kinds)}")
    cls = kinds[kind]
    if "kind" not in {f.name for f in dataclasses.fields(cls)}:
        mapping = {k: v for k, v in mapping.items() if k != "kind"}
    return options_from(cls, mapping, prefix)


def at_least(prefix: str, obj, minimum, *keys: str) -> None:
    """Each of ``obj``'s ``keys`` is ``>= minimum`` (the commonest value check)."""
    for key in keys:
        value = getattr(obj, key)
        if value < minimum:
            raise bad(f"{prefix}.{key}" if prefix else key, value,
                f"must be {'an integer ' if isinstance(minimum, int) else ''}>= {minimum}")


def one_of(key: str, value, choices) -> None:
    """``value`` is one of ``choices`` (the message lists them)."""
    if value not in choices:
        raise bad(key, value, f"unknown, choose one of {list(choices)}")


#: The folder a command was started in (set by the entry scripts, :func:`mark_launch_folder`),
#: inherited by the processes it launches: joblib's workers, submitit's jobs, whose own
#: working folder may be another (``hydra.job.chdir=true``, a cluster node).
LAUNCH_DIR = "TENG_EQ_LAUNCH_DIR"


def mark_launch_folder() -> None:
    """Record the current folder as the command's launch folder (:data:`LAUNCH_DIR`),
    for this process and those it starts: what an entry script does first."""
    os.environ[LAUNCH_DIR] = os.getcwd()
    user_folders_on_path()


def user_folders_on_path() -> None:
    """Make a user's modules next to where the command runs importable, as ``python -m``
    would: ``python pipeline/sweep.py`` puts the script's folder on ``sys.path``, not
    the current one. The launch folder (:data:`LAUNCH_DIR`) and the current folder
    are *appended* to ``sys.path``: found after the installed packages, so that a
    stray ``jax.py`` in the folder cannot shadow one (``python -m`` would put it first)."""
    on_path = {os.path.abspath(p or os.curdir) for p in sys.path}
    for folder in dict.fromkeys(filter(None, (os.environ.get(LAUNCH_DIR), os.getcwd()))):
        if os.path.abspath(folder) not in on_path:
            sys.path.append(folder)
            on_path.add(os.path.abspath(folder))


def import_impl(path: str, key: str) -> type:
    """The class ``module:Class`` named by config key ``key`` (e.g. ``method.impl``):
    an installed module, or a user's file in the folder the command runs in
    (:func:`user_folders_on_path`)."""
    if not isinstance(path, str) or ":" not in path:
        raise bad(key, path, "must name a class as 'package.module:Class'")
    module, _, name = path.partition(":")
    user_folders_on_path()
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as err:
        # The module itself (or a package above it) missing is a wrong name; a module
        # it imports missing is a dependency that is not installed.
        own = err.name is not None and (module == err.name or module.startswith(err.name + "."))
        hint = ("is it on the Python path, or a file in the folder the command runs in?" if own
                else "pip install -e . installs the declared dependencies")
        raise bad(key, path, f"cannot import it: {err} ({hint})")
    except ImportError as err:
        raise bad(key, path, f"cannot import it: {err}")
    if not hasattr(imported, name):
        raise bad(key, path, f"module {module} has no {name!r}")
    return getattr(imported, name)
