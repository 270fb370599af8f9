"""Self-checking cache entries: a damaged, truncated or stale file is detected
and rebuilt, at the helpers and at their two call sites (references, θ₀),
concurrent writers never expose half a file, and probing a new folder withstands
another process probing it at the same moment."""

import pathlib
import tempfile
import threading
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_config

from teng_eq import reference as ref
from teng_eq.cache.files import PROBE_TRIES, check_arrays, load_arrays, probe_folder, store_arrays
from teng_eq.fit import theta0 as initial_fit
from teng_eq.fit.theta0 import FitReport

KEY = {"what": "test", "n": 3, "lengths": [1.0, 2.0]}

#: The u₀ and fit quadrature a θ₀ entry is keyed by (its values on the grid): small.
_SINES = make_config("equation=allen_cahn", "equation.initial_condition=sines2d").equation
FIT_INPUTS = {"u0": _SINES.u0, "quadrature": _SINES.quadrature(8)}
#: A network the key describes (its content): the stand-in fits below never evaluate it.
NET = eqx.nn.Linear(2, 1, key=jax.random.PRNGKey(0))


def _flip_byte(path, where=0.5):
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path, keep=0.6):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_entry_round_trip_and_every_kind_of_damage(tmp_path):
    path = tmp_path / "e.npz"
    arrays = {"a": np.linspace(0, 1, 1000), "b": np.arange(6, dtype=np.int32).reshape(2, 3),
              "s": np.array("x")}
    store_arrays(path, arrays, KEY)
    got, why = check_arrays(path, KEY)
    assert why is None and got.keys() == arrays.keys()
    for k, a in arrays.items():
        assert got[k].dtype == a.dtype and np.array_equal(got[k], a)
    assert check_arrays(tmp_path / "none.npz", KEY) == (None, "missing")
    assert check_arrays(path, {**KEY, "n": 4})[1].startswith("stale")

    _flip_byte(path)  # zip's CRC or the digest catches it
    assert check_arrays(path, KEY)[1].startswith("corrupt")

    store_arrays(path, arrays, KEY)
    _truncate(path)
    assert check_arrays(path, KEY)[1].startswith("unreadable")

    # A well-formed file whose content changed under an old digest (e.g. an
    # array rewritten by hand): only the digest tells.
    store_arrays(path, arrays, KEY)
    with np.load(path) as data:
        members = {k: data[k] for k in data.files}
    members["a"] = members["a"] + 1e-12
    with open(path, "wb") as f:
        np.savez(f, **members)
    assert check_arrays(path, KEY)[1] == "corrupt (content digest mismatch)"

    # Entries written before digests existed are stale.
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    assert check_arrays(path, KEY)[1].startswith("stale")


def test_concurrent_writers_never_expose_half_a_file(tmp_path):
    path = tmp_path / "e.npz"
    store_arrays(path, {"v": np.zeros(200_000)}, KEY)
    problems, stop = [], threading.Event()

    def write(i):
        for j in range(8):
            store_arrays(path, {"v": np.full(200_000, float(10 * i + j))}, KEY)

    def read():
        while not stop.is_set():
            got, why = check_arrays(path, KEY)
            if why is not None or np.ptp(got["v"]) != 0:
                problems.append(why)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert problems == []
    assert not list(tmp_path.glob(".e.npz.*"))  # no temporary file left behind


@pytest.mark.parametrize("damage", [_flip_byte, _truncate], ids=["corrupted", "truncated"])
def test_damaged_reference_is_rebuilt(tmp_path, damage, caplog):
    eq = make_config("equation=allen_cahn", "equation.initial_condition=sines2d").equation
    times = np.array([0.0, 0.1, 0.2])
    first = ref.reference_solution(eq, times, cache_dir=tmp_path, n=16, dt=0.05)
    (path,) = tmp_path.glob("reference-*.npz")
    damage(path)
    again = ref.reference_solution(eq, times, cache_dir=tmp_path, n=16, dt=0.05)
    assert f"cache entry {path} is" in caplog.text
    for k in range(3):
        np.testing.assert_array_equal(again.spectrum(k), first.spectrum(k))
    # rewritten, sound
    assert load_arrays(path, {"reference": path.stem.removeprefix("reference-")}) is not None


@pytest.mark.parametrize("damage", [_flip_byte, _truncate], ids=["corrupted", "truncated"])
def test_damaged_theta0_is_refitted(tmp_path, monkeypatch, damage, caplog):
    fits = []

    def fit(net, u0, quadrature, *, key, fit, log=None, move=None):  # stands for the minutes-long fit
        fits.append(1)
        return jnp.arange(5.0) * len(fits), FitReport(stage1_loss=1e-8, stage2_loss=1e-14,
                                                      stage2_rel_loss=1e-15, converged=True, stage1_s=1.0,
                                                      stage2_s=2.0, stage2_damping=1e-8)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    description = {"initial_condition": "sines2d", "grid": 32, "seed": 0}
    call = {"net": NET, **FIT_INPUTS, "key": None, "fit": None,
            "description": description, "directory": tmp_path}
    theta, report = initial_fit.cached_initial_parameters(**call)
    assert report.cached is False and len(fits) == 1
    theta, report = initial_fit.cached_initial_parameters(**call)
    assert report.cached is True and len(fits) == 1 and report.stage2_loss == 1e-14 and report.seconds == 0
    np.testing.assert_array_equal(theta, np.arange(5.0))
    (path,) = (tmp_path / "theta0").glob("*.npz")
    damage(path)
    theta, report = initial_fit.cached_initial_parameters(**call)
    assert report.cached is False and len(fits) == 2 and f"cache entry {path} is" in caplog.text
    np.testing.assert_array_equal(theta, 2 * np.arange(5.0))
    assert initial_fit.cached_initial_parameters(**call)[1].cached is True


#: θ₀ fits above fit.stage2_tol=5e-14: (relative loss, stalled, cached, the warning's words).
ABOVE_TOLERANCE = [
    (1e-10, False, False, r"relative loss 1\.00e-10 > fit\.stage2_tol=5e-14, still improving at its last "
                          r"iteration; not cached: raise fit\.stage2_polish_iters \(now 25\)"),
    (1e-10, True, False, r"2e\+03x, where it stopped improving \(more than 1000x\); not cached: a wider "
                         r"network \(network\.width\) or a finer fit\.grid, or fit\.stage2_tol=1e-10"),
    (6.9e-12, True, True, r"138x, where it stopped improving \(within 1000x\); cached as what this network "
                          r"reaches: fit\.stage2_tol=7e-12 says so"),
]


@pytest.mark.parametrize("rel, stalled, cached, words", ABOVE_TOLERANCE,
                         ids=["still-improving", "stalled-far", "stalled-near"])
def test_a_fit_above_its_tolerance_is_cached_only_where_it_stalled_near_it(tmp_path, monkeypatch, rel,
                                                                           stalled, cached, words):
    """An unconverged θ₀ fit is used with a warning naming the setting to change; it is
    written only where it stopped improving within REACH_FACTOR of its tolerance (the next
    run then takes it from the cache, its loss and warning with it), else the next run fits
    again."""
    fits = []

    def fit(net, u0, quadrature, *, key, fit, log=None, move=None):
        fits.append(1)
        return jnp.arange(5.0), FitReport(stage1_loss=1e-8, stage2_loss=rel, stage2_rel_loss=rel,
                                          converged=False, stage1_s=1.0, stage2_s=2.0,
                                          stage2_damping=1e-8, stalled=stalled)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    call = {"net": NET, **FIT_INPUTS, "key": None,
            "fit": types.SimpleNamespace(stage2_tol=5e-14, stage2_polish_iters=25, stage2_max_iters=100),
            "description": {"initial_condition": "sines2d", "grid": 32, "seed": 0}, "directory": tmp_path}
    with pytest.warns(UserWarning, match=words):
        theta, report = initial_fit.cached_initial_parameters(**call)
    assert report.cached is False and len(fits) == 1 and report.advice.startswith("θ₀ fit ended above")
    if cached:
        again, hit = initial_fit.cached_initial_parameters(**call)
        assert hit.cached is True and len(fits) == 1
        assert (hit.stage2_rel_loss, hit.converged, hit.advice) == (rel, False, report.advice)
    else:
        with pytest.warns(UserWarning, match=words):
            again, _ = initial_fit.cached_initial_parameters(**call)
        assert len(fits) == 2 and not list(tmp_path.rglob("*.npz"))
    np.testing.assert_array_equal(again, np.arange(5.0))


def test_a_cache_that_cannot_be_written_costs_only_the_cache(tmp_path, monkeypatch, caplog):
    """The cache folder goes away (or the disk fills) after the preflight checked
    it: the θ₀ just fitted and the reference just computed are used for this run,
    with one warning line each, and nothing is left half-written."""
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # every write under it fails (NotADirectoryError, an OSError)
    cache = blocked / "cache"

    def fit(net, u0, quadrature, *, key, fit, log=None, move=None):
        return jnp.arange(5.0), FitReport(stage1_loss=1e-8, stage2_loss=1e-14, stage2_rel_loss=1e-15,
                                          converged=True, stage1_s=1.0, stage2_s=2.0, stage2_damping=1e-8)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    theta, report = initial_fit.cached_initial_parameters(
        NET, FIT_INPUTS["u0"], FIT_INPUTS["quadrature"], key=None, fit=None,
        description={"initial_condition": "sines2d", "grid": 32, "seed": 0}, directory=cache)
    np.testing.assert_array_equal(theta, np.arange(5.0))
    assert report.cached is False
    eq = make_config("equation=allen_cahn", "equation.initial_condition=sines2d").equation
    times = np.array([0.0, 0.1, 0.2])
    solution = ref.reference_solution(eq, times, cache_dir=cache, n=16, dt=0.05)
    uncached = ref.reference_solution(eq, times, cache_dir=False, n=16, dt=0.05)
    for k in range(3):
        np.testing.assert_array_equal(solution.spectrum(k), uncached.spectrum(k))
    lines = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [line.split(" not cached (")[0] for line in lines] == ["θ₀", "reference solution"]
    assert all("\n" not in line and line.endswith("used for this run only") for line in lines)
    assert blocked.read_text() == ""


def test_a_folder_another_process_makes_meanwhile_is_writable(tmp_path, monkeypatch):
    """Two sweeps started together on one new cache folder: the other process makes
    the folder between this probe's look and its mkdir (CI saw "File exists").
    The probe passes, and it leaves the folder to the process that made it."""
    folder = tmp_path / "cache" / "new"
    mkdir = pathlib.Path.mkdir

    def other_process_first(self, *args, **kwargs):
        mkdir(self, exist_ok=True)
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", other_process_first)
    assert probe_folder(folder) is None
    monkeypatch.undo()
    assert folder.is_dir() and not any(folder.iterdir())


def test_a_folder_removed_under_the_probe_is_probed_again(tmp_path, monkeypatch):
    """The other process removes the folder it made (its probe's clean-up) after
    this probe saw it and before this probe wrote into it: the probe starts again.
    A folder that vanishes every time is still reported, after PROBE_TRIES tries."""
    folder = tmp_path / "cache"
    mkstemp, calls = tempfile.mkstemp, []

    def removed_before(times):
        def racing_mkstemp(*args, dir, **kwargs):
            calls.append(dir)
            if len(calls) <= times:
                pathlib.Path(dir).rmdir()
            return mkstemp(*args, dir=dir, **kwargs)
        return racing_mkstemp

    monkeypatch.setattr(tempfile, "mkstemp", removed_before(1))
    assert probe_folder(folder) is None
    assert len(calls) == 2 and not folder.exists()  # the folder it made, removed again

    calls.clear()
    monkeypatch.setattr(tempfile, "mkstemp", removed_before(PROBE_TRIES))
    why = probe_folder(folder)
    assert why is not None and why.startswith(f"cannot write in {folder} (No such file or directory")
    assert len(calls) == PROBE_TRIES
