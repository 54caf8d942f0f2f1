"""The launcher's seams (issue 19): process code never prints (it reports through the OutputSink it is given), and
the parts handed to the supervisor, the node group, the agent and the live view are typed by Protocols, not Any."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
import time
from pathlib import Path

import pytest

import tfdist.launch.process as process_room
from tfdist.launch.console import liveview
from tfdist.launch.elastic.agent import backup_copy, flight as flight_agent, machine_run
from tfdist.launch.elastic.agent.backup_copy import BackupStore
from tfdist.launch.elastic.tcp.client import RendezvousLink
from tfdist.launch.elastic.agent.snapshot_copy import SnapshotCopy
from tfdist.launch.flight import recorder
from tfdist.launch.elastic.agent.agent import Agent
from tfdist.launch.elastic.agent.spec import AgentSpec
from tfdist.launch.elastic.agent.node_group import NodeGroup
from tfdist.launch.local.group import TaskGroup
from tfdist.launch.local.supervisor import Supervisor
from tfdist.launch.entry import compose
from tfdist.launch.process import spawn
from tfdist.protocol import Command, TaskPlan

LAUNCH = Path(process_room.__file__).parent.parent
PROCESS_MODULES = sorted(Path(process_room.__file__).parent.glob("*.py"))
# The core of both launchers: the supervisor and its room, the agent and the rendezvous, the flight recorder and the
# launcher's own modules. They hand their lines to a `say` (seams.Say) or an OutputSink the CLI wires to the
# terminal. Left out: elastic/secret.py and ssh/host_probe.py, commands of their own (``python -m``; the probe's
# answer is its stdout).
CORE_MODULES = sorted({*PROCESS_MODULES, *LAUNCH.glob("*.py"), *(LAUNCH / "local").glob("*.py"),
                       *(LAUNCH / "elastic").rglob("*.py"), *(LAUNCH / "flight").glob("*.py"),
                       *(LAUNCH / "ssh").glob("*.py")}
                      - {LAUNCH / "elastic" / "secret.py", LAUNCH / "ssh" / "host_probe.py"})


def _printing(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print")
            or (isinstance(node, ast.Attribute) and node.attr in ("stdout", "stderr")
                and isinstance(node.value, ast.Name) and node.value.id == "sys")]


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_process_and_core_code_never_prints(path):
    printing = _printing(path)
    assert printing == [], f"{path.name} prints (lines {printing}): hand the line to a say or an OutputSink instead"


def test_the_scan_sees_the_supervisor_and_the_agent_and_catches_a_print(tmp_path):
    assert {LAUNCH / "local" / "supervisor.py", LAUNCH / "elastic" / "agent" / "agent.py",
            LAUNCH / "ssh" / "driver.py"} <= set(CORE_MODULES)
    planted = tmp_path / "planted.py"
    planted.write_text("import sys\ndef f():\n    print('x', file=sys.stderr)\n")
    assert _printing(planted) == [3, 3]


SEAMS = [Supervisor.__init__, TaskGroup.__init__, NodeGroup.__init__, spawn.spawn, spawn.activate,
         machine_run.start_metrics, machine_run.set_task_states, machine_run.clean_up_folder,
         liveview.LiveView.__init__, liveview.final_state, compose.agent_spec, Agent.__init__,
         recorder.targets_of, recorder.others_running, flight_agent.send, flight_agent.answer, flight_agent.unasked,
         backup_copy.stream_files, backup_copy.receive_files, BackupStore.upload,
         SnapshotCopy.upload, RendezvousLink.upload, RendezvousLink.next_message]


@pytest.mark.parametrize("function", SEAMS, ids=lambda f: f.__qualname__)
def test_no_any_at_the_seams(function):
    loose = {name: annotation for name, annotation in inspect.signature(function).parameters.items()
             if "Any" in str(annotation.annotation)}
    assert loose == {}, f"{function.__qualname__} takes Any: {loose}"


def test_no_any_in_what_the_agent_is_given_or_exposes():
    loose = [f.name for f in dataclasses.fields(AgentSpec) if "Any" in str(f.type)]
    source = inspect.getsource(Agent.__init__)
    loose += [line.strip() for line in source.splitlines() if "self." in line and ": Any" in line]
    assert loose == []


class Recorder:
    """An OutputSink that keeps what it is given."""

    tf_log_level = 0

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, bool]] = []
        self.notices: list[str] = []

    def write(self, prefix: str, line: str, *, to_stderr: bool) -> None:
        self.lines.append((prefix, line, to_stderr))

    def notice(self, line: str) -> None:
        self.notices.append(line)


def test_a_tasks_output_goes_to_the_sink_it_was_given(tmp_path, capfd):
    script = tmp_path / "speak.py"
    script.write_text("import sys\nprint('to out', flush=True)\nprint('to err', file=sys.stderr, flush=True)\n")
    plan = TaskPlan(task_type="worker", task_index=0, address="127.0.0.1:1", tf_config="{}",
                    command=Command(str(script), interpreter=sys.executable), run_id="r", attempt=0, max_restarts=0,
                    job_name="j", heartbeat_path=str(tmp_path / "h"), error_path=str(tmp_path / "e"))
    sink = Recorder()
    proc = spawn.spawn(plan, attempt=0, base_env={"PATH": "/usr/bin:/bin"}, log_path=str(tmp_path / "w.log"),
                       console=sink)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() == 0
    spawn.stop_all([proc], 1.0)  # it has exited: this waits for its output to be read to its end
    assert ("[worker:0]", "to out\n", False) in sink.lines and ("[worker:0]", "to err\n", True) in sink.lines
    assert "to out" not in capfd.readouterr().out  # nothing reached the terminal but through the sink
    assert sorted((tmp_path / "w.log").read_text().splitlines()) == ["to err", "to out"]


def test_the_supervisors_lines_go_to_the_say_it_was_given(tmp_path, capfd):
    """The supervisor never prints (issue 19): the CLI hands it the terminal's say; here a list takes every line."""
    from tests.conftest import REPO_ROOT
    from tfdist.launch.spec import LaunchSpec

    fake = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
    spec = LaunchSpec(command=(sys.executable, fake, str(tmp_path / "out"), "--fail", "worker:0:3",
                               "--first-attempt-only"), workers=1, max_restarts=1, log_dir=str(tmp_path / "logs"),
                      warm_spares=False)
    lines: list[str] = []
    assert Supervisor(spec, contain=False, console=Recorder(), say=lines.append).run().succeeded
    assert any(line.startswith("tfdist: attempt 0: started 1 task(s)") for line in lines), lines
    assert any(line.startswith("tfdist: attempt 1: started 1 task(s)") for line in lines), lines
    assert all(line.startswith("tfdist: ") for line in lines), lines
    assert "tfdist" not in capfd.readouterr().err


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("path", PROCESS_MODULES, ids=lambda p: p.name)
def test_process_code_imports_nothing_of_the_rooms_that_use_it(path):
    """process/ starts and reaps processes for local/ and elastic/; it takes the task plan from tfdist.protocol."""
    above = sorted(n for n in _imported(path) if n.startswith(("tfdist.launch.local", "tfdist.launch.elastic",
                                                                  "tfdist.launch.console", "tfdist.launch.ssh")))
    assert above == [], f"{path.name} imports {above}"


def test_the_host_file_driver_asks_the_server_not_its_policy():
    driver = LAUNCH / "ssh" / "driver.py"
    reaching = [node.lineno for node in ast.walk(ast.parse(driver.read_text())) if isinstance(node, ast.Attribute)
                and node.attr == "policy"]
    assert reaching == [], f"ssh/driver.py reads a policy's state (lines {reaching}): ask the server"


def test_the_server_names_its_members_for_the_driver():
    from tests.unit.elastic.tcp.rdzv_peer import live_server, member, wait_until

    with live_server(min_nodes=3, max_nodes=3, node_timeout=10.0) as server:
        assert server.member_names() == set()
        a, b = member(server, "a"), member(server, "b")
        wait_until(lambda: server.member_names() == {"a", "b"}, what="both members named")
        a.close()
        wait_until(lambda: server.member_names() == {"b"}, what="the one that left gone")
        b.close()
