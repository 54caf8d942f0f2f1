"""The flight recorder across machines: the verdict rules on evidence from several machines (a table), the bounded
wire form of a machine's evidence, the ``dump``/``evidence`` messages' checks, and the collection on a live
rendezvous server on loopback (real handshakes, raw peers playing the agents)."""
from __future__ import annotations

import json
import stat

import pytest

from tests.unit.elastic.tcp.rdzv_peer import exited, keeping_alive, live_server, member, next_of
from tests.unit.test_flight_rules import EAGER_ALL_REDUCE, IN_CALLBACK_SLEEP, IN_TENSORFLOW, task
from tfdist.launch.elastic.tcp import auth
from tfdist.launch.elastic.messages import protocol as M
from tfdist.launch.elastic.agent.flight import evidence as evidence_message
from tfdist.launch.elastic.messages.flight import Dump, Evidence
from tfdist.launch.elastic.rendezvous.hang_collection import JobRecorder, Member, merge
from tfdist.launch.flight import transfer
from tfdist.launch.flight.evidence import TaskEvidence
from tfdist.launch.flight.rules import decide
from tfdist.protocol.stackdump import Frame, ThreadStack


def silent(name: str, machine: str = "node1 m2") -> TaskEvidence:
    return transfer.missing([name], machine=machine, why=f"no evidence from machine {machine}")[0]


# (id, tasks, watchdog, culprit, rule, words in the headline, words in the others line)
CASES = [
    ("a machine that sent nothing while the others wait inside TensorFlow",
     [task("worker:0", 120, IN_TENSORFLOW, machine="node0 m1"), silent("worker:1")], None,
     "worker:1", "no-evidence", ["its machine node1 m2 sent no evidence in time"], ["worker:0 is at step 120"]),
    ("the watchdog's task is chosen among the silent machine's tasks",
     [task("worker:0", 7, IN_TENSORFLOW), silent("worker:1"), silent("worker:2")], "worker:2",
     "worker:2", "no-evidence", ["worker:2 stopped first"], ["worker:1 is at an unknown step, no evidence from "
                                                           "machine node1 m2"]),
    ("a stopped task on a machine that answered outranks a silent machine",
     [task("worker:0", 9, IN_TENSORFLOW, state="T"), task("worker:1", 10, IN_TENSORFLOW), silent("worker:2")],
     None, "worker:0", "stopped", ["its process is stopped"], ["worker:2 is at an unknown step, no evidence"]),
    ("a task outside TensorFlow outranks a silent machine",
     [task("worker:0", 5, IN_TENSORFLOW), task("worker:1", 5, IN_CALLBACK_SLEEP), silent("worker:2")], None,
     "worker:1", "outside-tensorflow", ["slow_user_function"], ["no evidence from machine node1 m2"]),
    ("a task that exited on the machine that answered, with a silent machine still counted as running",
     [task("worker:0", 3, exit_code=1, gone=True), silent("worker:1")], None,
     "worker:0", "exited", ["exit code 1"], ["no evidence"]),
    ("a silent machine outranks steps that differ (heartbeats lag)",
     [task("worker:0", 10, EAGER_ALL_REDUCE), task("worker:1", 11, IN_TENSORFLOW), silent("worker:2")], None,
     "worker:2", "no-evidence", ["worker:2 stopped first"], ["worker:0 is at step 10"]),
    ("every machine answered: the single-machine rules as before",
     [task("worker:0", 4, IN_TENSORFLOW, machine="node0 a"), task("worker:1", 4, IN_TENSORFLOW, state="T",
                                                                  machine="node1 b")], None,
     "worker:1", "stopped", ["worker:1 stopped first"], ["worker:0 is at step 4"]),
]


@pytest.mark.parametrize("tasks,watchdog,culprit,rule,headline,others", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_the_verdict_across_machines(tasks, watchdog, culprit, rule, headline, others):
    verdict = decide(tasks, watchdog_task=watchdog)
    assert (verdict.culprit, verdict.rule) == (culprit, rule), verdict.headline
    for words in headline:
        assert words in verdict.headline, verdict.headline
    for words in others:
        assert words in verdict.others, verdict.others


# -- the wire form --------------------------------------------------------------------------------------------------
def deep_stack(depth: int, name: str = "MainThread") -> ThreadStack:
    inner = [Frame(f"user_{i}", "/job/train.py", i + 1) for i in range(depth - 1)]
    return ThreadStack(name, tuple(inner) + (Frame("<module>", "/job/train.py", 999),), idle=True,
                       wchan="futex_do_wait")


def test_evidence_survives_the_wire_and_gives_the_same_verdict():
    tasks = [task("worker:0", 120, IN_TENSORFLOW, output_tail=("step 120",)),
             task("worker:1", 119, IN_CALLBACK_SLEEP, heartbeat_age=3.25, wchan="hrtimer_nanosleep")]
    message = M.decode(M.encode(evidence_message(3, 0, tasks, reason="hang", watchdog="worker:1")))
    assert isinstance(message, Evidence) and message.watchdog == "worker:1" and not message.cut
    back = [transfer.from_fields(t, machine="node1 b") for t in message.tasks]
    assert [(t.name, t.step, t.threads, t.output_tail, t.machine) for t in back] == \
        [(t.name, t.step, t.threads, t.output_tail, "node1 b") for t in tasks]
    assert decide(back).headline == decide(tasks).headline


def test_long_stacks_and_lines_are_cut_with_a_marker_and_the_verdict_still_reads_them():
    threads = (deep_stack(300),) + tuple(deep_stack(300, f"helper-{i}") for i in range(80))
    big = TaskEvidence(name="worker:3", pid=7, step=5, state="S", threads=threads,
                       output_tail=tuple("x" * 5000 for _ in range(60)))
    fields, cut = transfer.bounded([big] * 4, budget=200_000)
    assert cut and len(json.dumps(fields)) <= 200_000
    message = M.decode(M.encode(Evidence(round=0, request=1, tasks=fields, cut=cut)))
    back = transfer.from_fields(message.tasks[0], machine="m")
    assert back.threads[0].name == "MainThread" and back.threads[-1].name.endswith("threads left out to fit the wire")
    main = back.threads[0].frames
    assert main[0] == Frame("user_0", "/job/train.py", 1) and main[-1].function == "<module>"
    assert any(f.file == "<cut>" and "frames left out" in f.function for f in main)
    assert all(line.endswith(transfer.CUT) and len(line) <= transfer.MAX_LINE for line in back.output_tail)
    assert len(back.output_tail) <= transfer.MAX_OUTPUT
    assert decide([back]).activities["worker:3"].frame == Frame("user_0", "/job/train.py", 1)


def test_a_machine_with_more_tasks_than_fit_still_sends_every_task_by_name():
    many = [TaskEvidence(name=f"worker:{i}", step=i, threads=(deep_stack(60),)) for i in range(200)]
    fields, cut = transfer.bounded(many, budget=20_000)
    assert cut and [f["name"] for f in fields] == [t.name for t in many]
    assert len(M.encode(Evidence(round=0, request=1, tasks=fields, cut=True))) < auth.MAX_FRAME


@pytest.mark.parametrize("change,words", [
    ({"frames": [[5, "f", "/a.py", 1]]}, "frames[].thread"),
    ({"frames": [[0, "f", "/a.py", 1]] * (transfer.MAX_FRAMES + 1)}, "frames: expected a list of at most"),
    ({"age": float("inf")}, "not a number this protocol accepts"),
    ({"age": -1}, "age: expected a number of seconds"),
    ({"state": "stopped!"}, "state: expected text of at most 4"),
    ({"output": ["x" * (transfer.MAX_LINE + 1)]}, "output[]"),
    ({"command": "rm -rf"}, "unknown field 'command'"),
    ({"threads": [["MainThread", "yes", ""]]}, "threads[].idle"),
    ({"step": True}, "step: expected a whole number"),
])
def test_a_bad_task_in_evidence_is_refused_by_name(change, words):
    fields, _ = transfer.bounded([task("worker:0", 1, IN_TENSORFLOW)])
    item = {**fields[0], **change}
    if "command" in change:
        del item["log"]  # as many keys as a task has, one of them unknown
    body = {"v": M.VERSION, "type": "evidence", "round": 0, "request": 1, "tasks": [item]}
    with pytest.raises(M.ProtocolError) as refused:
        M.decode(json.dumps(body).encode())
    assert words in str(refused.value), refused.value


@pytest.mark.parametrize("body,words", [
    ({"type": "dump", "round": 1, "request": 0}, "request: expected a whole number from 1"),
    ({"type": "dump", "round": 1, "request": 2, "reason": "because"}, "reason: expected one of"),
    ({"type": "evidence", "round": 1, "request": 0, "tasks": "all"}, "tasks: expected a list"),
    ({"type": "evidence", "round": 1, "request": 0, "tasks": [], "watchdog": "w" * 65}, "watchdog"),
])
def test_bad_dump_and_evidence_messages_are_refused(body, words):
    with pytest.raises(M.ProtocolError) as refused:
        M.decode(json.dumps({"v": M.VERSION, **body}).encode())
    assert words in str(refused.value)


def test_merge_names_the_machines_that_sent_nothing_and_the_tasks_a_machine_left_out():
    expected = {1: Member("node0 a", ("worker:0",)), 2: Member("node1 b", ("worker:1", "worker:2")),
                3: Member("node2 c", ("worker:3",))}
    fields, _ = transfer.bounded([task("worker:1", 8, IN_TENSORFLOW)])
    answers = {1: Evidence(round=0, request=0, tasks=transfer.bounded([task("worker:0", 8, IN_TENSORFLOW)])[0]),
               2: Evidence(round=0, request=1, tasks=fields)}
    tasks = merge(expected, answers, {}, 2.0)
    assert [t.name for t in tasks] == ["worker:0", "worker:1", "worker:2", "worker:3"]
    assert tasks[2].ended and "its agent listed no such task" in tasks[2].stacks_from
    assert tasks[3].evidence_missing and tasks[3].stacks_from == "no evidence from machine node2 c: it did not " \
                                                                 "answer in 2s"


# -- the collection on a live rendezvous ----------------------------------------------------------------------------
def _round_with_two_machines(server):
    first, second = member(server, "m1", rank=0), member(server, "m2", rank=1)
    rounds = [next_of(first, M.Round), next_of(second, M.Round)]
    return first, second, rounds[0].round


def test_the_rendezvous_asks_every_machine_before_anything_is_stopped_and_writes_one_report(tmp_path):
    said: list[str] = []
    recorder = JobRecorder(folder=str(tmp_path), run_id="job-1", say=said.append, wait=30.0)
    with live_server(said=said, recorder=recorder, min_nodes=2, max_nodes=2, node_timeout=10.0,
                     max_restarts=0) as server:
        first, second, round_ = _round_with_two_machines(server)
        with keeping_alive(first, second):
            # Machine 2's worker is stopped: its agent reads it, sends that unasked, then reports the failure.
            stopped = task("worker:1", 41, IN_TENSORFLOW, state="T")
            second.send(evidence_message(round_, 0, [stopped], reason="hang", watchdog="worker:1"))
            exited(second, round_, "failed", 41, "worker:1 hung")
            ask = next_of(first, Dump)
            assert (ask.round, ask.reason) == (round_, "hang")
            # Nothing is stopped while machine 1 has not answered (without the hold, the Stop comes at once).
            with pytest.raises(AssertionError, match=r"no \['Stop'\]"):
                first.receive((M.Stop,), timeout=1.0)
            assert not server.finished.is_set()
            first.send(evidence_message(round_, ask.request, [task("worker:0", 42, IN_TENSORFLOW,
                                                                  output_tail=("epoch 1",))]))
            next_of(first, M.Stop, timeout=10)  # only now: its tasks were read
            exited(first, round_, "stopped")
            for peer, port in ((first, 26200), (second, 26201)):
                peer.send(M.Ready(ports=[port]))
            finish = next_of(first, M.Finish, timeout=10)
    text = (tmp_path / f"hang-attempt-{round_}.txt").read_text()
    document = json.loads((tmp_path / f"hang-attempt-{round_}.json").read_text())
    assert document["verdict"]["culprit"] == "worker:1" and document["verdict"]["rule"] == "stopped"
    by_name = {t["task"]: t for t in document["tasks"]}
    assert by_name["worker:0"]["threads"][0]["frames"][0]["function"] == "quick_execute"
    assert by_name["worker:0"]["step"] == 42 and by_name["worker:0"]["host"] == "node0 m1 (127.0.0.1)"
    assert by_name["worker:1"]["host"] == "node1 m2 (127.0.0.1)"
    assert "epoch 1" in text and "worker:1 stopped first" in text
    for suffix in (".txt", ".json"):
        assert stat.S_IMODE((tmp_path / f"hang-attempt-{round_}{suffix}").stat().st_mode) == 0o600
    assert f"flight recorder (every machine, round {round_}): {document['verdict']['headline']}" in finish.report
    assert str(tmp_path / f"hang-attempt-{round_}.txt") in finish.report
    assert any("2 of 2 answered" in line for line in said), said


def test_a_machine_that_does_not_answer_is_named_not_waited_on_forever(tmp_path):
    recorder = JobRecorder(folder=str(tmp_path), run_id="job-2", wait=1.0)
    with live_server(recorder=recorder, min_nodes=2, max_nodes=2, node_timeout=10.0, max_restarts=0) as server:
        first, second, round_ = _round_with_two_machines(server)
        with keeping_alive(first, second):
            first.send(evidence_message(round_, 0, [task("worker:0", 12, IN_TENSORFLOW)], reason="task-failed",
                                        watchdog="worker:0"))
            exited(first, round_, "failed", 12, "worker:0 exit code 1")
            next_of(second, Dump)  # and never answers
            next_of(second, M.Stop, timeout=15)
            exited(second, round_, "stopped")
            for peer, port in ((first, 26202), (second, 26203)):
                peer.send(M.Ready(ports=[port]))
            finish = next_of(second, M.Finish, timeout=10)
    document = json.loads((tmp_path / f"hang-attempt-{round_}.json").read_text())
    assert document["reason"] == "task-failed"
    assert document["verdict"]["culprit"] == "worker:1" and document["verdict"]["rule"] == "no-evidence"
    silent_task = next(t for t in document["tasks"] if t["task"] == "worker:1")
    assert silent_task["stacks_from"] == "no evidence from machine node1 m2 (127.0.0.1): it did not answer in 1s"
    assert "no evidence in time" in finish.report


def test_late_or_unasked_evidence_for_a_reported_round_changes_nothing(tmp_path):
    recorder = JobRecorder(folder=str(tmp_path), run_id="job-3", wait=5.0)
    recorder.on_round(0, {1: Member("node0 a", ("worker:0",)), 2: Member("node1 b", ("worker:1",))})
    sent: list[tuple[int, object]] = []
    recorder.on_evidence(1, evidence_message(0, 0, [task("worker:0", 1, IN_TENSORFLOW, state="T")]),
                         lambda n, m: sent.append((n, m)) or True, now=100.0)
    assert [(n, type(m).__name__) for n, m in sent] == [(2, "Dump")]
    assert recorder.busy(now=101.0) and recorder.poll(now=101.0) is None
    recorder.on_evidence(2, evidence_message(0, 999, [task("worker:1", 1, IN_TENSORFLOW)]), lambda n, m: True)
    assert recorder.busy(now=101.0)  # an answer to another request is not this collection's
    recorder.on_lost(2)  # its connection went: no more waiting
    assert not recorder.busy(now=101.0)
    path, lines = recorder.poll(now=101.0)
    assert path and "worker:0 stopped first" in lines[0]
    recorder.on_evidence(2, evidence_message(0, 0, [task("worker:1", 1, IN_TENSORFLOW, state="T")]),
                         lambda n, m: sent.append((n, m)) or True)
    assert len(sent) == 1 and not recorder.busy() and recorder.poll() is None


@pytest.mark.parametrize("enabled,group,note", [(False, object(), "--no-flight-recorder"),
                                                (True, None, "no tasks were running on this machine")])
def test_an_agent_that_cannot_read_its_tasks_answers_at_once_and_says_why(enabled, group, note):
    from tfdist.launch.elastic.agent.flight import answer

    from tfdist.launch.elastic.agent.node_group import TaskOptions

    reply = answer(group, 2, Dump(round=2, request=5, reason="hang"),
                   TaskOptions(flight_recorder=enabled))
    assert (reply.round, reply.request, reply.tasks) == (2, 5, []) and note in reply.note
    assert M.decode(M.encode(reply)) == reply


def test_the_rendezvous_names_each_machines_tasks_as_the_agents_place_them():
    from tfdist.launch.elastic.rendezvous.hang_collection import round_members
    from tfdist.launch.elastic.rendezvous.membership_types import Assignment, StartRound

    nodes = ((0, "a", "10.0.0.1", 2, ()), (1, "b", "10.0.0.2", 1, ()))
    action = StartRound(round=0, world_size=3, workers=("x:1", "x:2", "x:3"),
                        assignments=(Assignment(7, 0, 0), Assignment(9, 1, 2)), nodes=nodes)
    plain = round_members(action, {7: "a", 9: "b"})
    assert plain == {7: Member("node0 a", ("worker:0", "worker:1")), 9: Member("node1 b", ("worker:2",))}
    with_chief = round_members(action, {7: "a", 9: "b"}, "chief")
    names = [n for m in with_chief.values() for n in m.tasks]
    assert sorted(names) == ["chief:0", "worker:0", "worker:1"] and len(with_chief[7].tasks) == 2
