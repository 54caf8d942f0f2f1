"""What the --firewall tests look at on the emulated machines (netns.py): whether one machine reaches another's
port, the nftables tables a machine holds, and a stand-in task that listens on its TF_CONFIG port as TensorFlow does.

The stand-in binds every interface, as TensorFlow's gRPC server does whatever TF_CONFIG names (grpc_server_lib.cc), so
only the firewall decides who connects; it starts in milliseconds where a real TensorFlow task takes seconds (the
real-TensorFlow cases are in test_netns_firewall.py)."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.integration.netns import Machines

# FAST's 2 s keep-alive (multilib.py) is missed under load and the job re-forms without the test's doing; these tests
# change rounds by a join or a SIGTERM (told to the rendezvous at once), so a looser one costs them nothing.
RELAXED = ["--node-timeout", "10"]

# Args: FOLDER. Listens on its TF_CONFIG port and, with --metrics-port, on its metrics port (both on every
# interface), writes FOLDER/up-<type>-<index> ("host port metrics_port"), then exits 0 when FOLDER/stop appears,
# 3 when FOLDER/fail does, 143 on SIGTERM. It keeps a heartbeat (tfdist.protocol.records) as a training task does, so
# a rendezvous takes a waiting machine in (it stops a round for a joiner once every machine of it trains).
STAND_IN = r"""
import json, os, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
folder = sys.argv[1]
config = json.loads(os.environ["TF_CONFIG"])
kind, index = config["task"]["type"], config["task"]["index"]
host, _, port = config["cluster"][kind][index].rpartition(":")
metrics = os.environ.get("TFDIST_METRICS_PORT", "")
# The metrics port first: once the TensorFlow port answers, both listen (a reset from either is then the firewall's).
early = [socket.create_server(("0.0.0.0", int(metrics)), backlog=64)] if metrics else []
listeners = [socket.create_server(("0.0.0.0", int(port)), backlog=64)]
with open(os.path.join(folder, f".up-{kind}-{index}"), "w") as out:
    out.write(f"{host} {port} {metrics or 0}\n")
os.rename(os.path.join(folder, f".up-{kind}-{index}"), os.path.join(folder, f"up-{kind}-{index}"))
beat, beaten = os.environ.get("TFDIST_HEARTBEAT_FILE"), 0.0
while True:
    if beat and time.time() - beaten > 1:
        beaten = time.time()
        with open(beat + ".tmp", "w") as out:
            json.dump({"v": 1, "step": 1, "time": time.time(), "state": "training"}, out)
        os.replace(beat + ".tmp", beat)
    if os.path.exists(os.path.join(folder, "stop")):
        sys.exit(0)
    if os.path.exists(os.path.join(folder, "fail")):
        sys.exit(3)
    time.sleep(0.05)
"""

# The same task with TensorFlow's own gRPC server at its TF_CONFIG port (seconds to start, where the stand-in takes
# milliseconds).
TENSORFLOW_TASK = STAND_IN.replace(
    '''listeners = [socket.create_server(("0.0.0.0", int(port)), backlog=64)]''',
    "import tensorflow as tf\n"
    "resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()\n"
    "listeners = [tf.distribute.Server(resolver.cluster_spec(), job_name=kind, task_index=index)]")
assert TENSORFLOW_TASK != STAND_IN


def probe(machines: Machines, i: int, target: str, port: int) -> str:
    """Machine ``i`` opens a TCP connection to ``target:port``: ``"open"``, ``"reset"`` (refused: the firewall's reset,
    or nothing listening) or what else happened (a timeout on a loaded machine, say)."""
    code = ("import socket\n"
            "try:\n"
            f"    socket.create_connection(({target!r}, {port}), 2).close(); print('open')\n"
            "except ConnectionRefusedError:\n"
            "    print('reset')\n"
            "except OSError as failed:\n"
            "    print(failed)\n")
    done = subprocess.run(machines.command(i, [sys.executable, "-I", "-S", "-c", code]), capture_output=True,
                          text=True, timeout=30)
    return done.stdout.strip() or done.stderr.strip()[-200:]


def reaches(machines: Machines, i: int, target: str, port: int) -> bool:
    """Machine ``i`` opens a TCP connection to ``target:port``."""
    return probe(machines, i, target, port) == "open"


def shut_out(machines: Machines, i: int, target: str, port: int) -> bool:
    """Machine ``i``'s connection to ``target:port`` is answered with a reset (checked where the port is known to
    listen, that is the firewall's): a timeout proves nothing, so it is not taken for one."""
    return probe(machines, i, target, port) == "reset"


def reaches_soon(machines: Machines, i: int, target: str, port: int, seconds: float = 30) -> bool:
    """:func:`reaches` within ``seconds``: on a loaded machine a probe can miss its 2 s (a stranger's probe is never
    retried: one connection it opens is the failure)."""
    deadline = time.monotonic() + seconds
    while not reaches(machines, i, target, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def tables(machines: Machines, i: int) -> str:
    """``nft list tables`` on machine ``i``."""
    return subprocess.run(machines.command(i, ["nft", "list", "tables"]), capture_output=True, text=True,
                          check=True, timeout=30).stdout


def tfdist_tables(machines: Machines) -> dict[int, list[str]]:
    """Every machine's tfdist tables (``inet tfdist-...``), machine -> names; machines without one are left out."""
    found = {}
    for i in range(1, machines.count + 1):
        names = [line.split()[-1] for line in tables(machines, i).splitlines() if " tfdist-" in line]
        if names:
            found[i] = names
    return found


def wait_until_no_table(machines: Machines, seconds: float = 30) -> dict[int, list[str]]:
    """Poll until no machine holds a tfdist table (the orphan watchers delete theirs within milliseconds of their
    launcher's death; a stopping agent, after its tasks); returns what is left at the end ({} when none)."""
    deadline = time.monotonic() + seconds
    left = tfdist_tables(machines)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = tfdist_tables(machines)
    return left


def task_addresses(folder: Path, names: list[str]) -> dict[str, tuple[str, int, int]]:
    """The stand-in tasks' ``(host, TensorFlow port, metrics port)``, by name (``worker-0``)."""
    found = {}
    for name in names:
        host, port, metrics = (folder / f"up-{name}").read_text().split()
        found[name] = (host, int(port), int(metrics))
    return found
