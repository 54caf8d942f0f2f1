"""--firewall's table with real nftables across emulated machines (one network namespace each, netns.py).

Machine 1 plays the launcher: a process that opens the real Firewall (launch/firewall/) over sockets listening on
every interface, as TensorFlow's gRPC server does. Machine 2 is in the round, machine 3 is not; then the round
changes. The table is gone after close() and after the launcher is killed with SIGKILL (its orphan watcher)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.firewall_lib import RELAXED, reaches, tables
from tests.integration.multilib import launch_env
from tests.integration.netns import Machines, why_no_namespaces
from tfdist.launch.firewall.nft import find_nft

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces())),
              pytest.mark.skipif(find_nft() is None,
                                 reason="nft is not installed (.ci/system-deps.sh installs nftables)")]

# The launcher's stand-in: listens like TensorFlow (all interfaces), then obeys "admit A,B" and "close" lines.
HOLDER = r"""
import socket, sys
from tfdist.launch.firewall import Firewall
listeners = []
for _ in range(2):
    s = socket.socket(socket.AF_INET6); s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 0)); s.listen(16); listeners.append(s)
ports = [s.getsockname()[1] for s in listeners]
wall = Firewall.open("job-1", ports)
print("ready", wall.table, *ports, flush=True)
for line in sys.stdin:
    verb, _, rest = line.strip().partition(" ")
    if verb == "admit":
        wall.admit(rest.split(","))
    elif verb == "close":
        wall.close()
    print("ok", flush=True)
"""


class Holder:
    def __init__(self, machines: Machines) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}
        self.proc = subprocess.Popen(machines.command(1, [sys.executable, "-c", HOLDER]), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)
        words = self.proc.stdout.readline().split()
        assert words[:1] == ["ready"], words
        self.table, self.ports = words[1], [int(p) for p in words[2:]]

    def tell(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"


def test_only_the_rounds_machines_reach_the_ports_and_close_removes_the_table():
    with Machines(3) as machines:
        holder = Holder(machines)
        member, stranger, here = machines.address(2), machines.address(3), machines.address(1)
        worker = holder.ports[0]
        assert holder.table in tables(machines, 1)
        # Before any round: loopback only.
        assert reaches(machines, 1, "127.0.0.1", worker) and reaches(machines, 1, "::1", worker)
        assert not reaches(machines, 2, here, worker)
        holder.tell(f"admit {member},{here}")
        assert all(reaches(machines, 2, here, p) for p in holder.ports)
        assert not any(reaches(machines, 3, here, p) for p in holder.ports)
        holder.tell(f"admit {stranger}")  # the next round: machine 2 left, machine 3 joined
        assert reaches(machines, 3, here, worker) and not reaches(machines, 2, here, worker)
        holder.tell("close")
        assert "tfdist-" not in tables(machines, 1)
        assert reaches(machines, 2, here, worker)  # the ports are the machine's own business again
        holder.proc.stdin.close()
        assert holder.proc.wait(timeout=30) == 0


def test_a_launcher_killed_with_sigkill_leaves_no_table():
    with Machines(2) as machines:
        holder = Holder(machines)
        holder.tell(f"admit {machines.address(1)}")
        assert holder.table in tables(machines, 1)
        assert not reaches(machines, 2, machines.address(1), holder.ports[0])
        holder.proc.send_signal(signal.SIGKILL)
        holder.proc.wait(timeout=30)
        # The watcher deletes the table as soon as it sees the pipe close; nft takes milliseconds.
        for _ in range(100):
            if holder.table not in tables(machines, 1):
                break
            time.sleep(0.1)
        assert holder.table not in tables(machines, 1)


# The machine's own outgoing connection from a guarded port while no task listens there (between rounds; any program
# can get such a port from the kernel then): the far side's answers must pass, whoever it is.
OUTGOING = r"""
import socket, sys
from tfdist.launch.firewall import Firewall
port, far, member = int(sys.argv[1]), sys.argv[2], sys.argv[3]
wall = Firewall.open("job-1", [port])
try:
    wall.admit([member])
    out = socket.socket()
    out.bind(("0.0.0.0", port))
    out.settimeout(3)
    try:
        out.connect((far, FAR_PORT))
        print("connected", flush=True)
    except OSError as failed:
        print("failed", failed, flush=True)
finally:
    wall.close()
"""
FAR_PORT = 8000


def test_the_answers_to_the_machines_own_connection_from_a_guarded_port_pass():
    """Before, the far side's SYN-ACK to a guarded local port was answered with a reset (it is no member), so the
    connection never opened: --firewall broke the machine's other traffic whenever the kernel gave it such a port."""
    serve = f"import socket, time; s = socket.create_server(('0.0.0.0', {FAR_PORT})); time.sleep(120)"
    with Machines(3) as machines:
        far = subprocess.Popen(machines.command(3, [sys.executable, "-c", serve]))
        try:
            deadline = time.monotonic() + 30
            while not reaches(machines, 3, machines.address(3), FAR_PORT):
                assert far.poll() is None and time.monotonic() < deadline, "the far side did not listen"
                time.sleep(0.1)
            script = OUTGOING.replace("FAR_PORT", str(FAR_PORT))
            done = subprocess.run(machines.command(1, [sys.executable, "-c", script, str(PORT), machines.address(3),
                                                       machines.address(2)]),
                                  env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "src")}, capture_output=True,
                                  text=True, timeout=60)
            assert done.stdout.strip() == "connected", done.stdout + done.stderr
            assert "tfdist-" not in tables(machines, 1)
        finally:
            far.kill()
            far.wait()


# A real task: TensorFlow's own gRPC server at its TF_CONFIG port, up until the test says stop.
TASK = r"""
import os, sys, time
import tensorflow as tf
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type, task_index=resolver.task_id)
open(os.path.join(sys.argv[1], "up"), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "stop")):
    time.sleep(0.1)
"""
PORT = 23456  # inside machine 1's own namespace: nothing else listens there


def _start_launcher(machines: Machines, tmp_path) -> subprocess.Popen:
    script = tmp_path / "task.py"
    script.write_text(TASK)
    argv = [sys.executable, "-m", "tfdist", "launch", "--firewall", "--workers", "1", "--host", machines.address(1),
            "--port-base", str(PORT), "--max-restarts", "0", "--log-dir", str(tmp_path / "logs"), "--",
            str(script), str(tmp_path)]
    launcher = subprocess.Popen(machines.command(1, argv), env=launch_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "up").exists():
        assert launcher.poll() is None, launcher.stdout.read()
        assert time.monotonic() < deadline, "the task's TensorFlow server did not start"
        time.sleep(0.2)
    return launcher


@pytest.mark.tf
def test_a_real_job_under_firewall_is_closed_to_a_stranger_and_leaves_no_table(tmp_path):
    with Machines(2) as machines:
        launcher = _start_launcher(machines, tmp_path)
        assert "tfdist-tfdist-" in tables(machines, 1)
        assert reaches(machines, 1, machines.address(1), PORT)  # the job's own machine: TensorFlow answers
        assert not reaches(machines, 2, machines.address(1), PORT)  # a machine outside the job: reset
        (tmp_path / "stop").touch()
        output, _ = launcher.communicate(timeout=120)
        assert launcher.returncode == 0, output
        assert "tfdist-" not in tables(machines, 1)
        assert not reaches(machines, 2, machines.address(1), PORT)


@pytest.mark.tf
def test_a_real_launcher_killed_with_sigkill_leaves_no_table(tmp_path):
    with Machines(2) as machines:
        launcher = _start_launcher(machines, tmp_path)
        assert "tfdist-tfdist-" in tables(machines, 1)
        launcher.kill()  # `ip netns exec` execs the launcher: this is SIGKILL to the launcher itself
        launcher.communicate(timeout=60)
        for _ in range(100):
            if "tfdist-" not in tables(machines, 1):
                break
            time.sleep(0.1)
        assert "tfdist-" not in tables(machines, 1)


# The same task on every machine of a rendezvous job: it says which task it is, so the test knows each one is up.
AGENT_TASK = TASK.replace('os.path.join(sys.argv[1], "up")',
                          'os.path.join(sys.argv[1], f"up-{resolver.task_type}-{resolver.task_id}")')


def _agents(machines: Machines, tmp_path, nnodes: str, script) -> list:
    from tests.integration.multilib import FAST, Agent, job_secret_file

    secret = job_secret_file(tmp_path)
    return [Agent(machines, i, ["--nnodes", nnodes, "--rdzv-endpoint", f"{machines.address(1)}:29400",
                                "--rdzv-id", "fwjob", "--rdzv-secret-file", secret, "-n", "1", *FAST, *RELAXED,
                                "--node-rank", str(i - 1), "--port-base", str(PORT), "--rdzv-timeout", "120",
                                "--firewall", "--", str(script), str(tmp_path)], tmp_path).start() for i in (1, 2)]


def _wait_until(condition, agents, what: str, seconds: float = 180) -> None:
    from tests.integration.multilib import all_output

    deadline = time.monotonic() + seconds
    while not condition():
        assert all(a.proc.poll() is None for a in agents[:1]), all_output(agents)[-4000:]
        assert time.monotonic() < deadline, f"{what}:\n" + all_output(agents)[-4000:]
        time.sleep(0.2)


@pytest.mark.tf
def test_a_two_machine_job_under_firewall_admits_its_machines_only(tmp_path):
    from tests.integration.multilib import all_output

    script = tmp_path / "task.py"
    script.write_text(AGENT_TASK)
    with Machines(3) as machines:
        agents = _agents(machines, tmp_path, "2", script)
        _wait_until(lambda: all((tmp_path / f"up-worker-{i}").exists() for i in (0, 1)), agents, "no round 0")
        for i in (1, 2):
            assert "tfdist-fwjob-" in tables(machines, i)
            assert reaches(machines, 3 - i, machines.address(i), PORT)  # the other machine of the round
            assert not reaches(machines, 3, machines.address(i), PORT)  # the stranger: reset, on every machine
        (tmp_path / "stop").touch()
        assert [a.wait(timeout=120) for a in agents] == [0, 0], all_output(agents)[-4000:]
        assert all("tfdist-" not in tables(machines, i) for i in (1, 2))


@pytest.mark.tf
def test_a_machine_that_left_the_job_is_shut_out_by_the_next_round(tmp_path):
    """Round 0 on machines 1 and 2; machine 2's agent stops (SIGTERM); round 1 runs on machine 1 alone, and its
    table no longer admits machine 2 while TensorFlow listens there again (machine 1 itself connects)."""
    from tests.integration.multilib import all_output

    script = tmp_path / "task.py"
    script.write_text(AGENT_TASK)
    with Machines(2) as machines:
        agents = _agents(machines, tmp_path, "1:2", script)
        _wait_until(lambda: all((tmp_path / f"up-worker-{i}").exists() for i in (0, 1)), agents, "no round 0")
        assert reaches(machines, 2, machines.address(1), PORT)
        agents[1].proc.send_signal(signal.SIGTERM)
        agents[1].wait(timeout=120)
        agents[0].wait_for(r"round 1: started workers .* on 1 machine\(s\)")
        _wait_until(lambda: reaches(machines, 1, machines.address(1), PORT), agents, "round 1 never listened")
        assert not reaches(machines, 2, machines.address(1), PORT)
        (tmp_path / "stop").touch()
        assert agents[0].wait(timeout=120) == 0, all_output(agents)[-4000:]
        assert "tfdist-" not in tables(machines, 1) and "tfdist-" not in tables(machines, 2)


@pytest.mark.tf
def test_tensorflows_server_listens_on_every_interface_whatever_tf_config_names(tmp_path):
    """Why --firewall exists: TensorFlow binds ``0.0.0.0`` (grpc_server_lib.cc) even for a TF_CONFIG that names
    loopback, so no address tfdist writes there keeps another machine out. If this ever fails, TensorFlow started to
    honour the address and the trust model's paragraph on it must change."""
    script = tmp_path / "task.py"
    script.write_text(TASK)
    config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{PORT}"]}, "task": {"type": "worker", "index": 0}})
    with Machines(2) as machines:
        task = subprocess.Popen(machines.command(1, [sys.executable, str(script), str(tmp_path)]),
                                env={**launch_env(), "TF_CONFIG": config}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not (tmp_path / "up").exists():
            assert task.poll() is None and time.monotonic() < deadline, "the TensorFlow server did not start"
            time.sleep(0.2)
        assert reaches(machines, 2, machines.address(1), PORT)
        (tmp_path / "stop").touch()
        assert task.wait(timeout=60) == 0
