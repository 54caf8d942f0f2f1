"""A warm spare: a Python process that has already imported TensorFlow and waits to become a task.

Importing TensorFlow is most of a task's start-up (several seconds on a small machine), and after a failure the whole
group restarts, so the launcher keeps one spare per task ready while the job trains. On a restart it sends each spare
its task's environment and command as one JSON line on stdin; the spare applies the environment and runs the script
as ``python SCRIPT`` (or ``python -m MODULE``) would. TensorFlow reads TF_CONFIG and CUDA_VISIBLE_DEVICES when the
strategy and the devices are created, not at import, so importing early changes nothing the script can see.

Run as ``python -u -m tfdist.launch.process.spare_process``. It imports ``TFDIST_WARM_PRELOAD`` (comma-separated, default
``tensorflow``) and the library modules the previous attempt's task had imported once it trained (sent as the first
line on stdin; recorded by the runtime next to the heartbeat file), so that a restarted task skips the script's
library imports as well (scikit-learn, tf-keras...). The user's own modules are never imported ahead.
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import sys

from tfdist.protocol import stackdump
from tfdist.protocol.plan import forget_bootstrap
from tfdist.protocol.variables import BOOTSTRAP
from tfdist.protocol.variables import WARM_PRELOAD as PRELOAD_VARIABLE
from tfdist.protocol.variables import WARM_START as WARM_MARK  # "1" in a task that started from a spare


def _preload(extra: list[str]) -> None:
    names = [n.strip() for n in os.environ.get(PRELOAD_VARIABLE, "tensorflow").split(",") if n.strip()]
    for name in names + extra:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the script will import (and report) it itself if it needs it
            pass


def main() -> int:
    # First line: the modules the previous attempt's task had imported ({"preload": [...]}), then the order.
    first = sys.stdin.readline()
    if not first:  # the launcher closed our stdin: we are not needed
        return 0
    _preload(list(json.loads(first).get("preload", [])))
    line = sys.stdin.readline()
    if not line:
        return 0
    order = json.loads(line)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the script gets the same empty stdin a cold-started task has
    os.environ.update(order["env"])
    os.environ[WARM_MARK] = "1"
    # The task bootstrap, when on, started with this process already (its variables were in the spare's own
    # environment); the task's copy of them must not reach the script's children. Its stack-dump registration
    # needs the task's heartbeat path, known only now.
    bootstrapped = os.environ.get(BOOTSTRAP) == "1"
    forget_bootstrap(os.environ)
    if bootstrapped:
        stackdump.install()
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
