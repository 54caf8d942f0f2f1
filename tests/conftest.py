"""Hermetic defaults for every test: this machine's real pip, uv and conda configuration is what lets it install
anything, so no test may read or write it. Each test gets its own HOME and config locations."""
from __future__ import annotations

import os
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
