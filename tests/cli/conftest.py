"""Fixtures shared by the CLI tests."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working folder of a command (where tfdist.toml is looked for), holding an empty train.py."""
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    return tmp_path
