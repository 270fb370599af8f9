"""Shared fixtures: Hydra composition of conf/, and an isolated cache per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@pytest.fixture
def compose_config():
    """``compose_config(["dt=0.01", …])``: conf/config.yaml with overrides, as Hydra builds it."""

    def _compose(overrides=()):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """θ₀ and reference cache shared by the tests of one session (never ~/.cache)."""
    return tmp_path_factory.mktemp("teng-cache")
