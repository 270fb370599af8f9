"""Shared fixtures: Hydra composition of conf/, and an isolated cache per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def compose_conf(overrides=()):
    """conf/config.yaml with ``overrides`` (e.g. ``["dt=0.01"]``), as Hydra builds it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def make_config(*overrides):
    """The validated :class:`RunConfig` of conf/ with ``overrides``: the one source of defaults."""
    from omegaconf import OmegaConf

    from teng_eq.config import RunConfig
    from teng_eq.preflight import key_namer

    cfg = compose_conf(overrides)
    return RunConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True), rename=key_namer(cfg))


@pytest.fixture
def compose_config():
    """``compose_config(["dt=0.01", …])``: :func:`compose_conf` as a fixture."""
    return compose_conf


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """θ₀ and reference cache shared by the tests of one session (never ~/.cache)."""
    return tmp_path_factory.mktemp("teng-cache")


@pytest.fixture(scope="session")
def warm_cache(cache_dir) -> Path:
    """``cache_dir`` holding θ₀ of the tiny problem below, fitted once in-process,
    so that parallel sweep jobs never fit it twice side by side."""
    from teng_eq.simulation import build_method

    build_method(make_config("equation.initial_condition=sines2d", "grid=32"), cache_dir=cache_dir)
    return cache_dir


# A sweep job small enough for the suite: band-limited IC, 32² grid, 4 steps at dt=0.02.
TINY = ["equation.initial_condition=sines2d", "grid=32", "eval_grid=64", "t_final=0.08", "progress=false"]


def run_sweep(tmp_path, uri, cache_dir, *overrides, multirun=True, timeout=900, tiny=TINY):
    """Run pipeline/sweep.py on the tiny problem in a subprocess; the finished process."""
    cmd = [sys.executable, str(ROOT / "pipeline" / "sweep.py"), *(["-m"] if multirun else []),
           *tiny, f"tracking_uri={uri}", f"cache_dir={cache_dir}",
           f"hydra.sweep.dir={tmp_path / 'multirun'}", f"hydra.run.dir={tmp_path / 'outputs'}",
           *overrides]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("TENG_EQ_PARENT_RUN", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def all_runs(uri):
    """Every run of the store at ``uri``, across experiments."""
    import mlflow

    client = mlflow.tracking.MlflowClient(uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])
