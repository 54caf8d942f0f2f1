"""One machine's share of a multi-machine round, as planned (nothing is started): its tasks, their TF_CONFIG, and
this machine's GPUs split among this machine's workers."""
from __future__ import annotations

import json

from tfdist.launch.elastic.agent.node_group import NodeGroup
from tfdist.protocol import Command
from tfdist.launch.spec import Timeouts

CLUSTER = ("198.18.0.1:4000", "198.18.0.1:4001", "198.18.0.2:4000", "198.18.0.2:4001")


def node1(tmp_path, env=None, gpus_per_task=None, base_env=None) -> NodeGroup:
    return NodeGroup(command=Command("train.py", ("--x",), interpreter="/usr/bin/python3"), workers=CLUSTER,
                      first_index=2, slots=2, node_rank=1, round_=3, job="j", log_dir=str(tmp_path),
                      env=env or {}, legacy_keras=True, max_restarts=0, timeouts=Timeouts(),
                      gpus_per_task=gpus_per_task, base_env=base_env or {})


def test_the_machine_runs_its_own_workers_of_the_whole_cluster(tmp_path):
    plans = node1(tmp_path).plans
    assert [p.name for p in plans] == ["worker:2", "worker:3"]
    configs = [json.loads(p.tf_config) for p in plans]
    assert all(c["cluster"]["worker"] == list(CLUSTER) for c in configs)
    assert [c["task"]["index"] for c in configs] == [2, 3]
    assert all(p.attempt == 3 for p in plans)


def test_local_gpus_are_split_among_local_workers(tmp_path):
    plans = node1(tmp_path, base_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}).plans
    assert [p.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0,1", "2,3"]
    plans = node1(tmp_path, base_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, gpus_per_task=1).plans
    assert [p.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["0", "1"]


def test_a_users_choice_of_devices_is_kept(tmp_path):
    plans = node1(tmp_path, env={"CUDA_VISIBLE_DEVICES": "3"}, base_env={"CUDA_VISIBLE_DEVICES": "0,1"}).plans
    assert [p.extra_env["CUDA_VISIBLE_DEVICES"] for p in plans] == ["3", "3"]


def test_no_gpus_no_device_variable(tmp_path):
    assert all("CUDA_VISIBLE_DEVICES" not in p.extra_env for p in node1(tmp_path, base_env={"PATH": "/bin"}).plans)


def test_a_failure_on_this_machine_carries_the_flight_recorders_verdict(tmp_path):
    """Worker 3 fails while worker 2 still trains: before anything is stopped, this machine's tasks are read, the
    verdict goes into the outcome's detail (what the agent tells the rendezvous server), the report into the folder.
    Real processes: the stand-in task, on loopback addresses."""
    import os
    import sys
    from pathlib import Path

    fake = str(Path(__file__).resolve().parents[3] / "bin" / "fake_task.py")
    group = NodeGroup(command=Command(fake, (str(tmp_path / "out"), "--fail", "worker:1:3", "--fail-delay", "0.5",
                                             "--others-wait", "--sleep", "60"), interpreter=sys.executable),
                      workers=("127.0.0.1:1", "127.0.0.1:2"), first_index=0, slots=2, node_rank=0, round_=0,
                      job="j", log_dir=str(tmp_path / "logs"), env={}, legacy_keras=False, max_restarts=0,
                      timeouts=Timeouts(), base_env=dict(os.environ))
    outcome = _first_outcome(group)
    assert outcome is not None and outcome[0] == "failed", outcome
    assert "exit code 3; flight recorder: worker:1 stopped first: exit code 3" in outcome[1], outcome
    report = tmp_path / "logs" / "hang-attempt-0.txt"
    assert f"(report: {report})" in outcome[1] and report.read_text().startswith("tfdist flight recorder")


def _first_outcome(group: NodeGroup, timeout: float = 60):
    """Start ``group``, poll until it reports an outcome (or ``timeout``), stop it, and return that outcome."""
    import time

    group.start()
    try:
        deadline = time.monotonic() + timeout
        outcome = None
        while outcome is None and time.monotonic() < deadline:
            outcome = group.outcome()
            time.sleep(0.05)
    finally:
        group.stop(graceful=False)
    return outcome


def _ps_worker_group(tmp_path, max_restarts: int) -> NodeGroup:
    """This machine runs worker 1 of a parameter-server job (chief, 2 workers, 1 ps elsewhere); the stand-in task
    fails its first start with exit code 5, then serves."""
    import os
    import sys
    from pathlib import Path

    from tfdist.launch.local.layout import ClusterLayout

    fake = str(Path(__file__).resolve().parents[3] / "bin" / "fake_task.py")
    layout = ClusterLayout(chief=("127.0.0.1:1",), worker=("127.0.0.1:2", "127.0.0.1:3"), ps=("127.0.0.1:4",))
    return NodeGroup(command=Command(fake, (str(tmp_path / "out"), "--fail", "worker:1:5", "--fail-starts", "1",
                                            "--sleep", "60"), interpreter=sys.executable),
                     workers=(), first_index=0, slots=1, node_rank=2, round_=0, job="j",
                     log_dir=str(tmp_path / "logs"), env={}, legacy_keras=False, max_restarts=max_restarts,
                     timeouts=Timeouts(), base_env=dict(os.environ), roles=(layout, ("worker:1",)))


def _starts(tmp_path) -> list[int]:
    path = tmp_path / "out" / "worker-1.starts"
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def test_a_failed_parameter_server_job_worker_is_restarted_alone_and_the_round_goes_on(tmp_path):
    import time

    group = _ps_worker_group(tmp_path, max_restarts=1)
    group.start()
    outcomes = []
    try:
        deadline = time.monotonic() + 60
        while len(_starts(tmp_path)) < 2 and time.monotonic() < deadline:
            outcomes.append(group.outcome())
            time.sleep(0.05)
        outcomes.append(group.outcome())
        starts = _starts(tmp_path)
        assert len(starts) == 2, starts
        assert set(outcomes) == {None}, "the round goes on: the rendezvous never hears of it"
        assert group.group.procs[0].pid == starts[1] and group.group.procs[0].poll() is None
        assert group.plans[0].address == "127.0.0.1:3"
        assert group.in_place.done == {"worker:1": 1}
    finally:
        group.stop(graceful=False)
    tasks = json.loads((tmp_path / "logs" / "tasks.json").read_text())
    assert tasks == [{"task": "worker:1", "pid": starts[1], "address": "127.0.0.1:3"}]


def test_a_worker_without_restarts_left_fails_the_round(tmp_path):
    group = _ps_worker_group(tmp_path, max_restarts=0)
    outcome = _first_outcome(group)
    assert outcome is not None and outcome[0] == "failed" and "exit code 5" in outcome[1], outcome
    assert len(_starts(tmp_path)) == 1


def test_a_round_calls_a_hang_at_the_learned_threshold_and_the_next_round_starts_from_it(tmp_path):
    """Across machines the hang rule learns the job's phases as on one machine (local/judging.py): worker 1 stalls in
    a step after 40 steps of 20 ms; the round fails at the steps' learned threshold (3 s), not --hang-timeout's
    300 s, and the next round's group (and a restarted agent) starts from the phases.json the round left in the
    agent's folder. Real processes: the stand-in phase task."""
    import os
    import sys
    from pathlib import Path

    from tfdist.protocol.records import Phase

    phase_task = str(Path(__file__).resolve().parents[3] / "bin" / "phase_task.py")

    def round_group(round_: int) -> NodeGroup:
        return NodeGroup(command=Command(phase_task, ("--stall", "worker:1", "--stall-at", "40", "--steps", "100000"),
                                         interpreter=sys.executable),
                         workers=("127.0.0.1:1", "127.0.0.1:2"), first_index=0, slots=2, node_rank=0, round_=round_,
                         job="j", log_dir=str(tmp_path / f"attempt-{round_}"), env={"TFDIST_HEARTBEAT_INTERVAL": "0"},
                         legacy_keras=False, max_restarts=0, timeouts=Timeouts(hang=300.0),
                         base_env=dict(os.environ), phases_folder=str(tmp_path))

    first = round_group(0)
    assert first.phases.learned == {}
    outcome = _first_outcome(first, timeout=120)
    assert outcome is not None and outcome[0] == "failed", outcome
    assert "no step for" in outcome[1] and "threshold 3.0 s" in outcome[1], outcome
    assert (tmp_path / "phases.json").exists()
    assert Phase.STEP in round_group(1).phases.learned, "the next round starts from what this one learned"
