"""Checkpoints in the driver: a run stopped anywhere and resumed from its last
checkpoint is the uninterrupted run, bit for bit, for any method state; a
diverging run stops with the step that broke it and keeps the last good one."""

import io
import json
import math
import zipfile

import numpy as np
import pytest
from helpers.configs import compose_conf, make_config
from helpers.fake_methods import TOY
from helpers.stops import Stop

from teng_eq.cache.files import load_arrays, store_arrays
from teng_eq.errors import Diverged
from teng_eq.run.checkpoint import CheckpointStore, rows_from_arrays, rows_to_arrays
from teng_eq.run.loop import divergence_reason
from teng_eq.run.result import History, Row
from teng_eq.run.simulation import run_simulation


def toy(*overrides):
    return make_config(*TOY, "dt=0.02", "t_final=0.2", "eval_grid=32", "equation.initial_condition=sines2d",
                       *overrides)


def _records(cfg, store=None, stop_after=None, **kw):
    seen = []

    def on_step(rec):
        seen.append((rec.step, dict(rec.metrics), rec.table()))
        if stop_after is not None and rec.step == stop_after:
            raise Stop

    try:
        result = run_simulation(cfg, on_step=on_step, checkpoints=store, snapshot_steps=(0, 4, 10), **kw)
    except Stop:
        result = None
    return result, seen


def _same(a, b):
    """The two runs' results agree exactly, timings aside."""
    np.testing.assert_array_equal(a.rel_l2, b.rel_l2)
    assert a.global_rel_l2 == b.global_rel_l2
    assert a.metrics.keys() == b.metrics.keys()
    for k in a.metrics:
        np.testing.assert_array_equal(a.metrics[k], b.metrics[k])
    for x, y in zip(a.losses, b.losses, strict=True):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a.network, b.network)
    assert a.snapshots.keys() == b.snapshots.keys()
    for n in a.snapshots:
        np.testing.assert_array_equal(a.snapshots[n][0], b.snapshots[n][0])


@pytest.fixture(scope="module")
def uninterrupted():
    return _records(toy())


@pytest.mark.parametrize("stop_after", [3, 5, 10])
def test_resumed_run_is_the_uninterrupted_run(tmp_path, uninterrupted, stop_after):
    whole, whole_seen = uninterrupted
    store = CheckpointStore(tmp_path / "c.npz", {"run": "r"})
    _, first = _records(toy(), store, stop_after=stop_after, checkpoint_every=4)
    assert [s for s, *_ in first] == list(range(stop_after + 1))
    # The callback raised after step stop_after was reported (as a stop asked for
    # by a signal does): that step is saved first, whatever checkpoint_every says.
    resumed, second = _records(toy(), store, checkpoint_every=4)
    assert resumed.resumed_from == stop_after
    _same(resumed, whole)
    # The resumed run reports every step once more, in order, with the same
    # values (steps up to the checkpoint replayed from it, the rest recomputed),
    # wall time aside for the recomputed ones.
    assert [s for s, *_ in second] == [s for s, *_ in whole_seen] == list(range(11))
    for (n, m, losses), (_, m0, losses0) in zip(second, whole_seen):
        assert {k: v for k, v in m.items() if k != "wall_time_s"} == \
               {k: v for k, v in m0.items() if k != "wall_time_s"}, n
        np.testing.assert_array_equal(losses, losses0)
    assert np.all(np.diff(resumed.wall_time_s) > 0)


def test_damaged_or_foreign_checkpoint_starts_afresh(tmp_path, uninterrupted, caplog):
    whole, _ = uninterrupted
    store = CheckpointStore(tmp_path / "c.npz", {"run": "r"})
    _records(toy(), store, stop_after=6, checkpoint_every=4)
    data = bytearray(store.path.read_bytes())
    # A byte of the saved state's data (not of the zip's own bookkeeping, which np.load may skip).
    member = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("state.npy")
    data[member.header_offset + 30 + len(member.filename) + member.compress_size - 8] ^= 0xFF
    store.path.write_bytes(bytes(data))
    result, _ = _records(toy(), store, checkpoint_every=4)
    assert result.resumed_from == 0 and "corrupt" in caplog.text
    _same(result, whole)
    other = CheckpointStore(store.path, {"run": "another"})  # the file holds run "r"'s final state
    assert other.load(None) is None and "stale" in caplog.text


def test_blow_up_stops_at_the_step_and_keeps_the_last_good_one(tmp_path):
    # The loss grows by growth² = 100 per step: step n's loss is 100^(n/2)
    # times the median of the steps before it, above 1e3 first at n = 4.
    cfg = toy("method.growth=10")
    store = CheckpointStore(tmp_path / "c.npz", {"run": "r"})
    with pytest.raises(Diverged, match=r"diverged at step 4 .*step_loss .* times the median") as err:
        _records(cfg, store, checkpoint_every=100, divergence_factor=1e3)
    assert (err.value.step, err.value.last_good_step) == (4, 3)
    assert err.value.tags == {"diverged_at_step": "4", "last_good_step": "3"}
    # Resumed with a looser factor it goes on from step 3, as if never stopped.
    resumed, _ = _records(cfg, store, checkpoint_every=100, divergence_factor=1e12)
    assert resumed.resumed_from == 3
    _same(resumed, _records(cfg, divergence_factor=1e12)[0])


def test_nan_isdivergence_reason(tmp_path):
    with pytest.raises(Diverged, match=r"diverged at step 7 .*non-finite") as err:
        _records(toy("method.nan_at=7"))
    assert err.value.last_good_step == 6


def test_round_off_losses_may_jump_without_diverging():
    """Step losses at round-off level (1e-17 against ‖u‖² = 1) jump by 1e7 without a
    blow-up: the median is floored at ε‖u‖²; with nothing to floor it they would count."""
    median = 1e-17
    assert divergence_reason({"step_loss": 1e-10}, median, 10, 1e6, scale=1.0) is None
    assert "times the median" in divergence_reason({"step_loss": 1e-10}, median, 10, 1e6, scale=0.0)
    assert "times the median" in divergence_reason({"step_loss": 1e-8}, median, 10, 1e6, scale=1.0)


def test_a_checkpoints_rows_keep_the_start_metrics():
    """The start's own metrics (a system's per-component errors and drifts at t = 0) come back
    with the rows: a resumed run reports its step 0 as the uninterrupted one did."""
    rows = (Row(0, 0.0, {"rel_l2/u": 1e-7, "drift/energy": 0.0}, err_sq=1.0, ref_sq=2.0),
            Row(1, 0.1, {"step_loss": 3e-12}, np.zeros((1, 4)), wall=0.5, err_sq=1.5, ref_sq=2.0))
    back = rows_from_arrays(rows_to_arrays(rows, np.zeros(0)), 1, sequential=True)
    assert [dict(r.metrics) for r in back] == [dict(r.metrics) for r in rows]
    assert back[0].record(1).metrics == rows[0].record(1).metrics


@pytest.mark.parametrize("count", [1, 2, 7, 64])
def test_the_history_keeps_the_median_of_the_step_losses(count):
    """The loop's history appends a row at a cost that does not grow with the step count, and
    each version holds the median of its step losses (np.median's, the start's row aside);
    an older version keeps its own, and only the newest may grow."""
    losses = np.random.default_rng(count).lognormal(size=count)
    history = History([Row(0, 0.0)])
    versions = [history]
    for n, loss in enumerate(losses, start=1):
        history = history.appended(Row(n, 0.01 * n, {"step_loss": float(loss)}))
        versions.append(history)
    for n, version in enumerate(versions):
        assert len(version) == n + 1 and version[-1].n == n
        assert version.median == (np.median(losses[:n]) if n else None)
    with pytest.raises(RuntimeError):
        versions[0].appended(Row(1, 0.01))


def test_an_error_above_the_solution_is_divergence_from_the_first_step():
    """No median exists at step 1 (the d = 10 heat run lost its solution in its first five
    steps, rel_l2 up to 7e2, and ended FINISHED): a measured rel_l2 above 1 ends the run."""
    assert divergence_reason({"step_loss": 1e-3, "rel_l2": 0.99}, None, 1, 1e6, error=1.0) is None
    assert divergence_reason({"step_loss": 1e-3, "rel_l2": 7e2}, None, 1, 1e6, error=1.0) == (
        "rel_l2 7.000e+02 is above divergence_error=1")
    assert compose_conf().divergence_error == 1.0


def test_an_estimate_or_a_loss_above_the_solution_is_divergence_from_the_first_step():
    """Without a reference only the estimate and the losses can see a blow-up at step 1:
    ``est_rel_l2`` above divergence_error, or a step or held-out loss above
    divergence_error² ‖u‖² (‖u‖² the step's start), ends the run; the healthy runs'
    ratios (at most 1e-11 and 1e-4, docs/guides/long-runs.md) are far below."""
    assert divergence_reason({"est_rel_l2": 0.99}, None, 1, 1e6, error=1.0) is None
    assert divergence_reason({"est_rel_l2": 50.0}, None, 1, 1e6, error=1.0) == (
        "est_rel_l2 5.000e+01 is above divergence_error=1")
    healthy = {"step_loss": 1e-11 * 4.0, "holdout_loss": 2e-11 * 4.0}
    assert divergence_reason(healthy, None, 1, 1e6, error=1.0, size=4.0) is None
    assert divergence_reason({"step_loss": 3.9, "holdout_loss": 4.1}, None, 1, 1e6, error=1.0, size=4.0
                             ).startswith("holdout_loss 4.100e+00 is above divergence_error² ‖u‖² = 4")
    assert divergence_reason({"step_loss": 2.5e5}, None, 1, 1e6, error=1.0, size=4.0).endswith(
        "the step's fit misses its target by more than the solution it started from")
    # No size (a global-in-time block), or no bound (divergence_error=inf): not judged.
    assert divergence_reason({"step_loss": 2.5e5}, None, 1, 1e6, error=1.0) is None
    assert divergence_reason({"step_loss": 2.5e5, "est_rel_l2": 50.0}, None, 1, 1e6, error=math.inf,
                             size=4.0) is None


def test_a_checkpoint_of_the_earlier_format_resumes(tmp_path, uninterrupted):
    """Checkpoints written before the run loop kept rows had their arrays sized for the
    whole run (zeros, NaN past the last step): one such resumes to the uninterrupted run."""
    store = CheckpointStore(tmp_path / "run.npz", {"run": "old"})
    _records(toy(), store, stop_after=4, checkpoint_every=4)
    arrays = load_arrays(store.path, store.key)
    n, total = 4, 10
    for key in ("err_sq", "ref_sq", "times", "u_sq"):
        arrays[f"record.{key}"] = np.concatenate([arrays[f"record.{key}"], np.zeros(total - n)])
    for key in ("boundary", "est"):
        arrays[f"record.{key}"] = np.concatenate([arrays[f"record.{key}"], np.full(total - n, np.nan)])
    arrays["record.wall"] = np.concatenate([arrays["record.wall"], np.zeros(total - n)])
    for key in [k for k in arrays if k.startswith("record.scalar.")]:
        arrays[key] = np.concatenate([arrays[key], np.full(total - n, np.nan)])
    store_arrays(store.path, arrays, store.key)
    resumed, _ = _records(toy(), store, checkpoint_every=4)
    assert resumed.resumed_from == 4
    _same(resumed, uninterrupted[0])


def test_a_callback_that_returns_true_stops_the_run_where_it_is(tmp_path):
    """A callback sees each step's record and the state after it; returning True ends the
    run there, its last state checkpointed, its result the steps so far."""
    seen = []

    def stop_at_three(record, state):
        seen.append((record.step, state.n))
        return state.n == 3

    store = CheckpointStore(tmp_path / "run.npz", {"run": "stop"})
    result = run_simulation(toy(), callbacks=[stop_at_three], checkpoints=store, checkpoint_every=100)
    assert seen == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert len(result.times) == 4 and json.loads(str(load_arrays(store.path, store.key)["info"]))["step"] == 3
