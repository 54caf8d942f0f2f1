"""Golden files: generated outputs pinned in tests/golden/<folder>/, so every change to them is reviewed."""
from __future__ import annotations

import os
from pathlib import Path

GOLDEN_ROOT = Path(__file__).resolve().parent / "golden"
# Read at import: the autouse isolation fixture clears TFDIST_* variables before each test runs.
UPDATE = os.environ.get("TFDIST_UPDATE_GOLDEN") == "1"


def check_golden(folder: str, name: str, text: str) -> None:
    """Compare ``text`` with tests/golden/FOLDER/NAME; with TFDIST_UPDATE_GOLDEN=1 rewrite the file instead."""
    path = GOLDEN_ROOT / folder / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with TFDIST_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(encoding="utf-8"), f"{folder}/{name} changed; review, then regenerate with " \
                                                     "TFDIST_UPDATE_GOLDEN=1"
