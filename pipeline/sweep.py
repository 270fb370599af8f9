"""Run TENG jobs from the Hydra configs in conf/, one MLflow run per job.

    python pipeline/sweep.py                                   # one run, defaults
    python pipeline/sweep.py -m dt=0.0016,0.005,0.02           # a sweep
    python pipeline/sweep.py +experiment=paper_heat2d          # the paper's setting
"""

from __future__ import annotations

import os

# One OpenBLAS thread (jax's CPU LAPACK): measured on 2 cores, a default-config
# TENG-Heun step takes 0.89 s with 1 thread and 1.36 s with 2, which fight
# XLA's own threads. Must be set before numpy/jax load; an explicit value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys
import tempfile
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from teng_eq import plots
from teng_eq.config import ConfigError, RunConfig, check_group_choices
from teng_eq.simulation import run_simulation
from teng_eq.tracking import default_tracking_uri, flatten, tracked_run

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    resolved = OmegaConf.to_container(cfg, resolve=True)
    try:
        run_cfg = RunConfig.from_mapping(resolved)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    uri = cfg.tracking_uri or default_tracking_uri(ROOT)
    name = f"{cfg.method.name}-{cfg.equation.name}-dt{cfg.dt}"
    with tracked_run(uri, cfg.experiment_name, artifact_root=ROOT / "mlruns", run_name=name,
                     tags={"method": cfg.method.name, "equation": cfg.equation.name}) as run:
        run.params({**flatten(resolved), "method": cfg.method.name, "equation": cfg.equation.name})
        bar = tqdm(total=run_cfg.n_steps, disable=not cfg.progress, desc=name, file=sys.stderr)

        def on_step(rec):
            if rec.step == 1:
                bar.reset()  # the θ₀ fit before the first step must not count in the rate
            run.metric("rel_l2", rec.rel_l2, rec.step)
            run.metric("step_loss", rec.step_loss, rec.step)
            run.metric("wall_time_s", rec.wall_time_s, rec.step)
            bar.set_postfix_str(f"t={rec.t:.4f} err={rec.rel_l2:.2e} loss={rec.step_loss:.1e}")
            bar.update()
            if rec.step % 100 == 0:
                run.flush()

        result = run_simulation(run_cfg, on_step=on_step, cache_dir=cfg.cache_dir,
                                log=lambda msg: bar.write(msg) if cfg.progress else None)
        bar.close()
        run.metric("rel_l2", result.rel_l2[0], 0)
        for key in ("global_rel_l2", "runtime_s", "compile_s", "reference_s"):
            run.metric(key, getattr(result, key))
        cached = result.fit_info["cached"]
        # Time this run spent fitting θ₀: 0 when another run had cached it.
        run.metric("fit_s", 0.0 if cached else result.fit_info["stage1_s"] + result.fit_info["stage2_s"])
        run.tags({"theta0_cached": cached, "theta0_loss": f"{result.fit_info['stage2_loss']:.3e}"})
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
            run.artifact(Path(tmp) / "config.yaml", "config")
            plots.error_curve(Path(tmp) / "error.png", result.times, result.rel_l2,
                              result.step_loss, title=name)
            run.artifact(Path(tmp) / "error.png", "plots")
    return result.global_rel_l2


if __name__ == "__main__":
    try:
        check_group_choices(sys.argv[1:], CONF)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    main()
