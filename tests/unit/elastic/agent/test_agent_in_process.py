"""The per-machine agent in process, with a stand-in for its machine's share of a round (no TensorFlow, no task
processes): the real agent, its real client and a real rendezvous server on loopback (tests/unit/elastic/tcp/rdzv_peer.py).
Joining, a round's start, training, success, failure, a lost machine, growth, stops by signal (the agent's
StopRequests, delivered by calling the handler as the kernel would), version refusal and a lost rendezvous."""
from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.unit.elastic.tcp import rdzv_peer
from tests.unit.elastic.tcp.rdzv_peer import SECRET, VERSIONS, keeping_alive, live_server, member, next_of
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.agent.phases import AgentPhase, allowed
from tfdist.launch.elastic.agent.spec import AgentSpec
from tfdist.launch.elastic.backends import Agent
from tfdist.launch.local.ports import free_ports
from tfdist.launch.outcome import Outcome, RunState
from tfdist.protocol import Command
from tfdist.status import ExitStatus


# Generous deadlines, polled: each agent starts a watcher process and ends with the server's and the watcher's
# bounded waits, which a machine shared with other test runs may stretch well past their usual second or two.
DEADLINE_S = 60.0


def wait_until(predicate, timeout: float = DEADLINE_S, what: str = "the condition") -> None:
    rdzv_peer.wait_until(predicate, timeout, what)


class FakeGroup:
    """A round's group that does what the test says: ``training``, then ``ended`` with an outcome."""

    def __init__(self, **given: object) -> None:
        self.given = given
        self.plans: list = []
        self.spare_env: dict[str, str] = {}
        self.reported_training = False
        self.spares_filled = False
        self.is_training = False
        self.ended: tuple[Outcome, str] | None = None
        self.calls: list[str] = []
        self.stopped_as = Outcome.PREEMPTED
        self.saves_until_killed = False  # stop() waits, as a saving group would, until the agent says kill now
        self.flight = None  # the flight recorder's report on a failure: none here
        self.tasks: list = []  # what read_tasks() returns (the rendezvous' dump)

    def read_tasks(self) -> list:
        self.calls.append("read tasks")
        return self.tasks

    def start(self) -> None:
        self.calls.append("start")

    def describe(self) -> str:
        return f"worker:{self.given['first_index']} (fake)"

    def training(self) -> bool:
        return self.is_training

    def progressed(self) -> bool:
        return self.is_training

    def preload(self) -> list[str]:
        return []

    def step(self) -> int | None:
        return 7 if self.is_training else None

    def outcome(self) -> tuple[Outcome, str] | None:
        return self.ended

    def end(self) -> None:
        self.calls.append("end")

    def finish(self, seconds: float) -> Outcome:
        self.calls.append("finish")
        return Outcome.SUCCEEDED

    def stop(self, *, graceful: bool) -> Outcome:
        self.calls.append(f"stop graceful={graceful}")
        kill_now = self.given["kill_now"]
        if self.saves_until_killed:
            wait_until(kill_now, what="kill now")  # type: ignore[arg-type]
            self.calls.append("cut short")
        return self.stopped_as


class Machine:
    """One agent running in a thread, its round groups recorded as they are made."""

    def __init__(self, tmp_path: Path, port: int, *, name: str = "agent", serve: bool = False, slots: int = 1,
                 versions: dict[str, str] | None = None, say: Callable[[str], None] | None = None,
                 **spec: object) -> None:
        values = dict(job="job", endpoint_host="127.0.0.1", endpoint_port=port, min_nodes=1, max_nodes=2,
                      slots=slots, command=Command("train.py", interpreter=sys.executable), node_name=name,
                      node_timeout=10.0, rdzv_timeout=10.0, first_round_wait=0.0, grace_period=5.0, serve=serve,
                      secret=SECRET, versions=dict(VERSIONS if versions is None else versions),
                      log_dir=str(tmp_path / name))
        values.update(spec)
        self.agent = Agent(AgentSpec(**values), **({"say": say} if say else {}))  # type: ignore[arg-type]
        self.groups: list[FakeGroup] = []
        self.agent.make_group = self._make
        self.status: list[int] = []
        self.escaped: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.status.append(self.agent.run())
        except BaseException as error:  # noqa: BLE001 - a test looks at it
            self.escaped = error

    def _make(self, **given: object) -> FakeGroup:
        group = FakeGroup(**given)
        self.groups.append(group)
        return group

    def start(self) -> "Machine":
        self.thread.start()
        return self

    def round_group(self, count: int = 1, timeout: float = DEADLINE_S) -> FakeGroup:
        wait_until(lambda: len(self.groups) >= count, timeout, what=f"round group {count}")
        return self.groups[count - 1]

    def wait(self, timeout: float = DEADLINE_S) -> int:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the agent did not return"
        assert self.escaped is None, self.escaped
        # Every agent that ran went through its named phases by the table's moves (agent/phases.py), to the end.
        assert allowed(self.agent.phases) and self.agent.phase is AgentPhase.DONE, self.agent.phases
        return self.status[0]

    def signal(self, signum: int) -> None:
        self.agent.stops._on_signal(signum, None)


@contextlib.contextmanager
def machines(*running: Machine) -> Iterator[None]:
    try:
        yield
    finally:
        for machine in running:
            if machine.thread.is_alive():
                machine.signal(signal.SIGTERM)
                machine.signal(signal.SIGTERM)
            machine.thread.join(DEADLINE_S)


def _server(**settings: object):
    return live_server(**{"node_timeout": 10.0, "max_nodes": 2, "min_nodes": 1, **settings})


def test_the_agent_joins_and_says_it_is_ready_with_its_ports(tmp_path):
    with _server(min_nodes=2) as server:
        machine = Machine(tmp_path, server.address[1], name="alpha", slots=2).start()
        with machines(machine):
            wait_until(lambda: server.policy.nodes, what="the agent's join")
            (node,) = dict(server.policy.nodes).values()
            assert node.name == "alpha" and node.slots == 2
            wait_until(lambda: len(next(iter(dict(server.policy.nodes).values())).ports or ()) == 2,
                       what="the agent's ready message")


def test_a_round_starts_the_group_with_the_clusters_workers(tmp_path):
    with _server(min_nodes=2) as server:
        machine = Machine(tmp_path, server.address[1], name="alpha").start()
        with machines(machine):
            wait_until(lambda: len(server.policy.nodes) == 1, what="the agent's join")
            peer = member(server, "beta", ports=[20001])
            with keeping_alive(peer):
                round_ = next_of(peer, M.Round, timeout=DEADLINE_S)
                group = machine.round_group()
            assert group.calls == ["start"]
            assert group.given["workers"] == tuple(round_.workers) and len(round_.workers) == 2
            assert group.given["first_index"] != round_.first_index  # each machine gets its own share
            assert group.given["round_"] == round_.round == 0


def test_training_is_reported_and_a_success_finishes_the_job(tmp_path):
    with _server() as server:
        machine = Machine(tmp_path, server.address[1]).start()
        with machines(machine):
            group = machine.round_group()
            group.is_training = True
            wait_until(lambda: group.reported_training, what="the training report")
            group.ended = (Outcome.SUCCEEDED, "the workers here exited 0")
            assert machine.wait() == 0
            assert group.calls == ["start", "end"]  # the shared ending, once
            assert server.result is not None and server.result.status == 0


def test_a_failure_is_reported_and_ends_the_job_without_restarts(tmp_path):
    with _server(max_restarts=0) as server:
        machine = Machine(tmp_path, server.address[1], max_restarts=0).start()
        with machines(machine):
            group = machine.round_group()
            group.ended = (Outcome.FAILED, "worker:0 exited with exit code 3")
            status = machine.wait()
            assert status == server.result.status and status != 0
            assert "worker:0 exited with exit code 3" in server.result.report


def test_a_failure_with_restarts_left_starts_the_next_round(tmp_path):
    with _server(max_restarts=1) as server:
        machine = Machine(tmp_path, server.address[1], max_restarts=1).start()
        with machines(machine):
            first = machine.round_group()
            first.ended = (Outcome.FAILED, "worker:0 exited with exit code 3")
            second = machine.round_group(2)
            assert second.given["round_"] == 1 and first.calls == ["start", "end"]
            second.ended = (Outcome.SUCCEEDED, "the workers here exited 0")
            assert machine.wait() == 0


def test_a_lost_machine_stops_the_round_at_once_and_the_rest_go_on(tmp_path):
    with _server() as server:
        machine = Machine(tmp_path, server.address[1]).start()
        with machines(machine):
            wait_until(lambda: len(server.policy.nodes) == 1, what="the agent's join")
            machine.round_group().is_training = True  # round 0, alone
            wait_until(lambda: machine.groups[0].reported_training, what="training")
            peer = member(server, "beta", ports=[20001])  # grows the job...
            with keeping_alive(peer):
                grown = machine.round_group(2)
                assert machine.groups[0].calls == ["start", "stop graceful=True"]  # growth saves first
                assert len(grown.given["workers"]) == 2
            peer.close()  # ... then is lost: no collective can finish, the round is stopped at once
            alone = machine.round_group(3)
            assert grown.calls == ["start", "stop graceful=False"] and len(alone.given["workers"]) == 1
            alone.ended = (Outcome.SUCCEEDED, "done")
            assert machine.wait() == 0


def test_a_signal_on_a_machine_that_does_not_serve_saves_reports_and_leaves(tmp_path):
    with _server(min_nodes=1) as server:
        machine = Machine(tmp_path, server.address[1]).start()
        with machines(machine):
            group = machine.round_group()
            group.is_training = True
            wait_until(lambda: group.reported_training, what="training")
            machine.signal(signal.SIGTERM)
            assert machine.wait() == 128 + signal.SIGTERM
            assert group.calls == ["start", "stop graceful=True"]


def test_a_second_signal_cuts_the_save_short_and_a_second_ctrl_c_abandons_the_agent(tmp_path):
    with _server() as server:
        machine = Machine(tmp_path, server.address[1]).start()
        with machines(machine):
            group = machine.round_group()
            group.is_training, group.saves_until_killed = True, True
            wait_until(lambda: group.reported_training, what="training")
            machine.signal(signal.SIGINT)  # the first Ctrl-C: a graceful stop, the group saves...
            wait_until(lambda: "stop graceful=True" in group.calls, what="the graceful stop")
            machine.signal(signal.SIGINT)  # ... the second kills now and leaves as interrupted
            machine.thread.join(DEADLINE_S)
            assert group.calls == ["start", "stop graceful=True", "cut short"]
            assert machine.status == [] and isinstance(machine.escaped, KeyboardInterrupt)


def test_a_signal_where_the_rendezvous_is_served_stops_every_machine_with_the_signals_status(tmp_path):
    port = free_ports(1)[0]
    host = Machine(tmp_path, port, name="host", serve=True, min_nodes=2).start()
    other = Machine(tmp_path, port, name="other", min_nodes=2)
    with machines(host, other):
        wait_until(lambda: host.agent.server is not None, what="the rendezvous served by the agent")
        other.start()
        groups = [host.round_group(), other.round_group()]
        for group in groups:
            group.is_training = True
        wait_until(lambda: all(g.reported_training for g in groups), what="training everywhere")
        host.signal(signal.SIGTERM)  # forwarded to the server by the agent's StopRequests
        assert host.wait() == 128 + signal.SIGTERM and other.wait() == 128 + signal.SIGTERM
        assert all(g.calls == ["start", "stop graceful=True"] for g in groups)


@pytest.mark.parametrize("serve", [True, False])
def test_the_agent_says_what_a_signal_asked_for_once(tmp_path, serve):
    """As the one-machine supervisor does: the first signal is answered on the console at once, not only when the
    round has ended (before, an agent said nothing until then)."""
    lines: list[str] = []
    port = free_ports(1)[0]
    with contextlib.ExitStack() as stack:
        if not serve:
            port = stack.enter_context(_server())
            port = port.address[1]
        machine = Machine(tmp_path, port, name="host", serve=serve, say=lines.append).start()
        with machines(machine):
            group = machine.round_group()
            group.is_training = True
            wait_until(lambda: group.reported_training, what="the training report")
            machine.signal(signal.SIGTERM)
            assert machine.wait() == 128 + signal.SIGTERM
    said = [line for line in lines if "got SIGTERM: stopping all tasks" in line]
    assert len(said) == 1 and "a second SIGTERM kills them now" in said[0], lines


def test_an_agent_with_other_versions_is_refused_and_says_why(tmp_path, capfd):
    with _server(min_nodes=2) as server:
        first = member(server, "first")
        machine = Machine(tmp_path, server.address[1], versions={**VERSIONS, "tensorflow": "9"}).start()
        with machines(machine), keeping_alive(first):
            assert machine.wait() == int(ExitStatus.USAGE)
        err = capfd.readouterr().err
        assert "refused by the rendezvous" in err and "tensorflow 9" in err
        assert machine.groups == []


@pytest.mark.parametrize("rank", [5])
def test_an_agent_with_a_rank_outside_the_job_is_refused(tmp_path, rank):
    with _server() as server:
        machine = Machine(tmp_path, server.address[1], node_rank=rank).start()
        with machines(machine):
            assert machine.wait() == int(ExitStatus.USAGE)


def test_a_lost_rendezvous_stops_the_group_and_the_agent_gives_up_after_the_rdzv_timeout(tmp_path, capfd):
    with _server() as server:
        machine = Machine(tmp_path, server.address[1], rdzv_timeout=1.0).start()
        with machines(machine):
            group = machine.round_group()
            group.is_training = True
            wait_until(lambda: group.reported_training, what="training")
            server.close()
            assert machine.wait() == int(ExitStatus.TASK_FAILED)
            assert group.calls[:2] == ["start", "stop graceful=False"]
    assert "lost the rendezvous" in capfd.readouterr().err


def test_the_agent_answers_the_rendezvous_dump_with_its_tasks_before_they_are_stopped(tmp_path):
    """Another machine's task hung: the rendezvous asks this agent for its tasks; it reads them (read_tasks) and
    sends them back before any stop, and they are in the one report."""
    from tests.unit.test_flight_rules import IN_TENSORFLOW, task
    from tfdist.launch.elastic.agent.flight import evidence
    from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder

    recorder = JobRecorder(folder=str(tmp_path / "reports"), run_id="r", wait=20.0)
    (tmp_path / "reports").mkdir()
    with _server(min_nodes=2, max_restarts=0, recorder=recorder) as server:
        machine = Machine(tmp_path, server.address[1], name="alpha", node_rank=0, max_restarts=0).start()
        with machines(machine):
            wait_until(lambda: len(server.policy.nodes) == 1, what="the agent's join")
            peer = member(server, "beta", rank=1, ports=[20001])
            round_ = next_of(peer, M.Round)
            group = machine.round_group()
            group.tasks = [task("worker:0", 30, IN_TENSORFLOW)]
            peer.send(evidence(round_.round, 0, [task("worker:1", 29, IN_TENSORFLOW, state="T")],
                               watchdog="worker:1"))
            wait_until(lambda: (tmp_path / "reports" / "hang-attempt-0.json").exists(), what="the report")
            assert group.calls == ["start", "read tasks"]
    document = json.loads((tmp_path / "reports" / "hang-attempt-0.json").read_text())
    assert document["verdict"]["culprit"] == "worker:1"
    assert [t["task"] for t in document["tasks"]] == ["worker:0", "worker:1"]
    assert document["tasks"][0]["step"] == 30 and document["tasks"][0]["host"].startswith("node0 alpha")


def test_a_failure_here_sends_this_machines_evidence_and_the_other_machine_is_asked(tmp_path):
    from tests.unit.test_flight_rules import IN_TENSORFLOW, task
    from tfdist.launch.elastic.agent.flight import evidence
    from tfdist.launch.elastic.messages.flight import Dump
    from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder
    from tfdist.launch.flight.report import HangReport
    from tfdist.launch.flight.rules import decide

    recorder = JobRecorder(folder=None, run_id="r", wait=20.0)
    with _server(min_nodes=2, max_restarts=0, recorder=recorder) as server:
        machine = Machine(tmp_path, server.address[1], name="alpha", node_rank=0, max_restarts=0).start()
        with machines(machine):
            wait_until(lambda: len(server.policy.nodes) == 1, what="the agent's join")
            peer = member(server, "beta", rank=1, ports=[20001])
            next_of(peer, M.Round)
            group = machine.round_group()
            mine = (task("worker:0", 3, IN_TENSORFLOW, state="T"),)
            group.flight = (HangReport("r", 0, "hang", decide(mine), mine, 0.0), "worker:0")
            group.ended = (Outcome.FAILED, "worker:0 made no progress")
            ask = next_of(peer, Dump)
            assert (ask.round, ask.reason) == (0, "hang")
            peer.send(evidence(0, ask.request, [task("worker:1", 3, IN_TENSORFLOW)]))
            wait_until(lambda: recorder.reports, what="the report")
    assert recorder.reports[-1][2][0].startswith("worker:0 stopped first")


def test_the_agents_lines_and_its_rendezvous_lines_go_to_the_say_it_was_given(tmp_path, capfd):
    """The agent never prints (issue 19): the CLI hands it the terminal's say; here a list takes every line."""
    lines: list[str] = []
    host = Machine(tmp_path, free_ports(1)[0], name="host", serve=True, say=lines.append)
    assert host.agent.state is RunState.STARTING  # the live view's header, typed as the supervisor's
    host.start()
    with machines(host):
        group = host.round_group()
        wait_until(lambda: host.agent.state is RunState.RUNNING, what="the agent's state: running")
        group.is_training = True
        wait_until(lambda: group.reported_training, what="the training report")
        group.ended = (Outcome.SUCCEEDED, "the workers here exited 0")
        assert host.wait() == 0
    assert host.agent.state == "succeeded"  # once over: how it ended (its cause)
    assert any(line.startswith("tfdist[rdzv]: ") for line in lines), lines  # the rendezvous it serves
    assert any(line.startswith("tfdist[agent]: serving the rendezvous for job job") for line in lines), lines
    assert any(line.startswith("tfdist[node0]: round 0: started workers") for line in lines), lines
    assert lines[-1] == "tfdist[node0]: job over, exit status 0"
    assert "succeeded" in lines[-2], lines  # the closing report, shown where the rendezvous is served
    assert "tfdist" not in capfd.readouterr().err
