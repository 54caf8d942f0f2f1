"""Hermetic defaults for every test: this machine's real pip, uv and conda configuration is what lets it install
anything, so no test may read or write it. Each test gets its own HOME and config locations.

Also: a test fails when it leaves a thread of tfdist's running (an object it made was never closed, or its close()
does not stop its threads), and each test has a time budget (pytest-timeout) that fits its kind, so one hang costs
minutes, not the run."""
from __future__ import annotations

import importlib.util
import os
import threading
import time
import warnings
from pathlib import Path

import pytest

# Variables that point tools at configuration; each is reset per test.
_CONFIG_VARIABLES = (
    "PIP_CONFIG_FILE", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_FIND_LINKS",
    "UV_CONFIG_FILE", "UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_NO_CONFIG",
    "CONDARC", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "MAMBA_ROOT_PREFIX",
    "TF_CONFIG", "TF_USE_LEGACY_KERAS", "CUDA_VISIBLE_DEVICES",
)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME and every XDG/config variable into a fresh temporary folder."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local" / "state"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(home / "etc-xdg"))
    for name in _CONFIG_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("TFDIST_"):
            monkeypatch.delenv(name, raising=False)
    return home


REPO_ROOT = Path(__file__).resolve().parents[1]


# -- time budgets -----------------------------------------------------------------------------------------------------
# Fast tests get pyproject's `timeout` (120 s: the slowest takes about 10 s alone here, a few times that under load),
# and so do the tests that tests/slow_cases.py leaves out of `make test-fast` for taking a second or more.
# Tests marked slow (real TensorFlow, network namespaces) have taken up to 514 s alone here (test_deploy_chain); CI's
# loaded 2-core machine is about 1.5x slower, so they get 900 s.
SLOW_TEST_TIMEOUT_S = 900
SLOW_BY_MARK = pytest.mark.slow_by_mark  # marked slow in its own file (not only listed in tests/slow_cases.py)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.slow_cases import listed_slow

    # Tests marked tf run TensorFlow in child processes: skip them where it is not installed, found without
    # importing it (importing TensorFlow at collection cost test-fast 10-20 s of CPU for tests it does not run).
    no_tf = importlib.util.find_spec("tensorflow") is None
    for item in items:
        if no_tf and item.get_closest_marker("tf") is not None:
            item.add_marker(pytest.mark.skip(reason="needs TensorFlow installed"))
        if item.get_closest_marker("slow") is not None:
            item.add_marker(SLOW_BY_MARK)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SLOW_TEST_TIMEOUT_S))
        elif listed_slow(item.nodeid):  # seconds, not minutes: out of test-fast, keeping the fast budget
            item.add_marker(pytest.mark.slow)


# -- leaked threads ---------------------------------------------------------------------------------------------------
# A closed object's threads end within a second (they wait on bounded queues and events); under load give them more.
THREAD_GRACE_S = 5.0


def _started_by_tfdist(thread: threading.Thread) -> bool:
    """Whether the thread runs tfdist code (its target, or its class's run, is defined in a tfdist module)."""
    target = getattr(thread, "_target", None)  # CPython keeps the target until the thread ends
    module = getattr(target, "__module__", None) if target is not None else type(thread).__module__
    return isinstance(module, str) and (module == "tfdist" or module.startswith("tfdist."))


def _new_tfdist_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t not in before and t.is_alive() and _started_by_tfdist(t)]


@pytest.fixture(autouse=True)
def no_leaked_tfdist_threads(request: pytest.FixtureRequest) -> object:
    """Fail the test if a tfdist thread it started is still running after it (and after its fixtures' clean-up).
    Tests marked slow in their own file (real TensorFlow, network namespaces) get a warning instead: the check has
    been run over every other test, not yet over those."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE_S
    left = _new_tfdist_threads(before)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _new_tfdist_threads(before)
    if left:
        what = "the test left tfdist threads running (close what it made): " + ", ".join(
            sorted(f"{t.name} ({getattr(t, '_target', None)!r})" for t in left))
        if request.node.get_closest_marker("slow_by_mark") is not None:
            warnings.warn(what, stacklevel=1)
        else:
            pytest.fail(what, pytrace=False)


# -- /dev/shm leftovers ------------------------------------------------------------------------------------------------
# Launchers and agents keep in-memory snapshots in /dev/shm/tfdist-*; every exit path removes them. The run's summary
# names any that appeared during the run and are still there (another process on this machine may have made them:
# a report, not a failure).
_SHM = Path("/dev/shm")


def _shm_folders() -> set[str]:
    try:
        return {p.name for p in _SHM.iterdir() if p.name.startswith("tfdist-")}
    except OSError:
        return set()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SHM_AT_START] = _shm_folders()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left = sorted(_shm_folders() - config.stash.get(_SHM_AT_START, set()))
    if left:
        terminalreporter.section("/dev/shm folders left")
        terminalreporter.write_line(f"{len(left)} tfdist folder(s) in {_SHM} appeared during this run and are still "
                                    "there (made by this run's launchers, or by other processes on this machine):")
        for name in left:
            terminalreporter.write_line(f"  {_SHM / name}")


_SHM_AT_START = pytest.StashKey[set]()
