"""Where tfdist keeps its state (mirror backups, run records): one rule for every command."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping


def state_dir(environ: Mapping[str, str]) -> Path:
    """tfdist's state folder: ``$XDG_STATE_HOME/tfdist``, else ``~/.local/state/tfdist`` (XDG base directories)."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                          ".local", "state")
    return Path(base) / "tfdist"
