"""A warm spare: a Python process that has already imported TensorFlow and waits to become a task.

Importing TensorFlow is most of a task's start-up (several seconds on a small machine), and after a failure the whole
group restarts, so the launcher keeps one spare per task ready while the job trains. On a restart it sends each spare
its task's environment and command as one JSON line on stdin; the spare applies the environment and runs the script
as ``python SCRIPT`` (or ``python -m MODULE``) would. TensorFlow reads TF_CONFIG and CUDA_VISIBLE_DEVICES when the
strategy and the devices are created, not at import, so importing early changes nothing the script can see.

Run as ``python -u -m tfdist.launch.spare``; ``TFDIST_WARM_PRELOAD`` lists the modules to import ahead
(comma-separated, default ``tensorflow``).
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import sys

PRELOAD_VARIABLE = "TFDIST_WARM_PRELOAD"
WARM_MARK = "TFDIST_WARM_START"  # "1" in a task that started from a spare


def _preload() -> None:
    for name in filter(None, os.environ.get(PRELOAD_VARIABLE, "tensorflow").split(",")):
        try:
            importlib.import_module(name.strip())
        except ImportError:
            pass  # the script will report it itself, with its own traceback


def main() -> int:
    _preload()
    line = sys.stdin.readline()
    if not line:  # the launcher closed our stdin: we are not needed
        return 0
    order = json.loads(line)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the script gets the same empty stdin a cold-started task has
    os.environ.update(order["env"])
    os.environ[WARM_MARK] = "1"
    argv = list(order["argv"])
    if argv[:1] == ["-m"]:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
