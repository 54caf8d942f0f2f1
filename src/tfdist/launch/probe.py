"""What a machine reports before a multi-machine job starts: versions, and whether the script is there.

Run on every host by the host-file driver (``python -m tfdist.launch.probe SCRIPT`` over ssh) and sent by every
agent when it joins the rendezvous. Reads package metadata only: no TensorFlow import, so it takes milliseconds.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys

# TensorFlow's distributions: any one of them provides `tensorflow`.
TENSORFLOW_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tensorflow-macos", "tf-nightly")


def versions() -> dict[str, str]:
    """``{"python": ..., "tfdist": ..., "tensorflow": ...}`` of this interpreter."""
    from tfdist import __version__

    tensorflow = "not installed"
    for dist in TENSORFLOW_DISTS:
        try:
            tensorflow = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    return {"python": platform.python_version(), "tfdist": __version__, "tensorflow": tensorflow}


def main(argv: list[str]) -> int:
    script = argv[0] if argv and argv[0] else None
    report = {"versions": versions(), "cwd": os.getcwd(),
              "script": None if script is None else os.path.isfile(script)}
    print("TFDIST-PROBE " + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
