"""The supervisor with real processes (a stand-in task, no TensorFlow): success rules, restarts, reports, signals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO_ROOT
from tests.integration.faultlib import survivors as alive

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def launch(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfdist", "launch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, **kw)


def records(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def wait_gone(pids, timeout=10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pids):
        time.sleep(0.05)
    return alive(pids)


def test_two_workers_succeed_with_prefixed_output_and_logs(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "logs"
    result = launch("-n", "2", "--log-dir", str(logs), "--tee", "--env", "MY_FLAG=7", FAKE, str(out))
    assert result.returncode == 0, result.stderr
    assert "[worker:0] hello from worker:0 attempt 0" in result.stdout
    assert "[worker:1] worker:1 done" in result.stdout
    got = records(out)
    assert set(got) == {"worker-0-0", "worker-1-0"}
    assert all(r["env"]["MY_FLAG"] == "7" for r in got.values())
    assert (logs / "attempt-0" / "worker-1.log").read_text().startswith("hello from worker:1")


def test_failed_task_restarts_whole_group_then_succeeds(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--max-restarts", "2", "--backoff", "0", FAKE, str(out), "--fail", "worker:1:5",
                    "--first-attempt-only", "--others-wait", "--sleep", "1.0")
    assert result.returncode == 0, result.stderr
    got = records(out)
    assert {"worker-0-0", "worker-1-0", "worker-0-1", "worker-1-1"} <= set(got)
    assert "worker:1 (pid" in result.stderr and "exit code 5" in result.stderr
    assert "restarting the group (1/2)" in result.stderr
    assert "succeeded after 1 restart(s)" in result.stderr


def test_exception_gives_root_cause_report_and_status_3(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--max-restarts", "1", "--backoff", "0", FAKE, str(out), "--raise", "worker:1",
                    "--others-wait")
    assert result.returncode == 3
    report = result.stderr[result.stderr.index("did not succeed"):]
    assert "after 2 attempt(s)" in report
    assert "root cause (attempt #1): worker:1" in report
    assert "ValueError: boom in worker:1" in report
    assert report.rstrip().endswith("ValueError: boom in worker:1")
    # worker:1 ran (and failed) in both attempts; worker:0 may be stopped before it gets far.
    assert {"worker-1-0", "worker-1-1"} <= set(records(out))


def test_leader_success_stops_parameter_servers_and_evaluator(tmp_path):
    from tfdist.launch.spec import LaunchSpec, Timeouts
    from tfdist.launch.local.supervisor import Supervisor

    out = tmp_path / "out"
    # The evaluator never ends on its own: it is stopped once the leader's peers had their (shortened) moment.
    spec = LaunchSpec(command=(sys.executable, FAKE, str(out)), workers=1, ps=1, chief=True, evaluator=True,
                      timeouts=Timeouts(after_success=0.3), log_dir=str(tmp_path / "logs"))
    assert Supervisor(spec).run().succeeded
    got = records(out)
    assert set(got) == {"chief-0-0", "worker-0-0", "ps-0-0", "evaluator-0-0"}
    assert wait_gone([r["pid"] for r in got.values()]) == []


def test_evaluator_failure_does_not_stop_training(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--evaluator", FAKE, str(out), "--fail", "evaluator:0:9", "--sleep", "1")
    assert result.returncode == 0, result.stderr
    assert "evaluator failed" in result.stderr and "training goes on" in result.stderr
    assert "worker-0-1" not in records(out), "no restart for an evaluator failure"


def test_parameter_server_exit_fails_the_attempt(tmp_path):
    out = tmp_path / "out"
    # --max-restarts 0: one attempt is the case here (the default budget is 3 since the repeated-failure guard).
    result = launch("-n", "1", "--ps", "1", "--chief", "--max-restarts", "0", FAKE, str(out), "--fail", "ps:0:0",
                    "--sleep", "5")
    assert result.returncode == 3
    assert "root cause (attempt #0): ps:0" in result.stderr


def _starts(out: Path, task: str) -> list[int]:
    path = out / f"{task}.starts"
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def test_a_parameter_server_job_restarts_a_failed_worker_alone_in_place(tmp_path):
    out, logs = tmp_path / "out", tmp_path / "logs"
    result = launch("-n", "2", "--ps", "1", "--chief", "--max-restarts", "2", "--backoff", "0", "--log-dir", str(logs),
                    FAKE, str(out), "--fail", "worker:1:5", "--fail-starts", "1", "--sleep", "0.5",
                    "--wait-starts", "worker-1:2")
    assert result.returncode == 0, result.stderr
    assert "worker:1 exit code 5: restarting worker:1 alone, in place (1/2); the other tasks keep running" \
        in result.stderr
    assert "restarting the group" not in result.stderr and not (logs / "attempt-1").exists()
    # Only worker 1 started twice; its second start had the same TF_CONFIG (index, address) as the first.
    assert [len(_starts(out, t)) for t in ("chief-0", "ps-0", "worker-0", "worker-1")] == [1, 1, 1, 2]
    second = _starts(out, "worker-1")[1]
    assert f"worker:1 restarted in place: pid {second} 127.0.0.1:" in result.stderr
    assert json.loads(records(out)["worker-1-0"]["tf_config"])["task"] == {"type": "worker", "index": 1}
    events = [json.loads(line) for line in (logs / "events.jsonl").read_text().splitlines()]
    assert [(e["task"], e["pid"]) for e in events if e["event"] == "task-restarted"] == [("worker:1", second)]


def test_a_parameter_server_job_restarts_a_stopped_worker_alone_in_place(tmp_path):
    # A SIGSTOPped worker never exits: the chief drops it (gRPC keep-alive) and it used to stay stopped until the job
    # ended. Silent for --hang-timeout, it is killed and started again alone, as a worker that exited would be.
    # No warm spares: a spare imports TensorFlow first, which on a loaded machine can outlast the chief's 30 s of
    # steps (the chief then waits for worker:1's second start without heartbeats, and is rightly found hung).
    out, logs = tmp_path / "out", tmp_path / "logs"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdist", "launch", "-n", "2", "--ps", "1", "--chief", "--max-restarts", "2",
         "--backoff", "0", "--hang-timeout", "5", "--log-dir", str(logs), "--no-warm-spares", FAKE, str(out),
         "--sleep", "30", "--wait-starts", "worker-1:2"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    first = None
    try:
        deadline = time.monotonic() + 60
        while not _starts(out, "worker-1"):
            assert time.monotonic() < deadline and launcher.poll() is None, "worker:1 never started"
            time.sleep(0.05)
        first = _starts(out, "worker-1")[0]
        os.kill(first, signal.SIGSTOP)
        _, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 0, err
    assert "worker:1 stopped (SIGSTOP) and silent for 5s: restarting worker:1 alone, in place (1/2)" in err, err
    assert "restarting the group" not in err and not (logs / "attempt-1").exists(), err
    assert [len(_starts(out, t)) for t in ("chief-0", "ps-0", "worker-0", "worker-1")] == [1, 1, 1, 2]
    second = _starts(out, "worker-1")[1]
    assert f"worker:1 restarted in place: pid {second} 127.0.0.1:" in err
    assert wait_gone([first]) == [], "the stopped worker was killed, not left behind"
    events = [json.loads(line) for line in (logs / "events.jsonl").read_text().splitlines()]
    assert [(e["task"], e["pid"]) for e in events if e["event"] == "task-restarted"] == [("worker:1", second)]


def test_a_worker_that_used_its_own_restarts_fails_the_attempt(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--ps", "1", "--chief", "--max-restarts", "1", "--backoff", "0", FAKE, str(out),
                    "--fail", "worker:1:5", "--fail-starts", "9", "--others-wait", "--sleep", "30")
    assert result.returncode == 3, result.stderr
    assert "restarting worker:1 alone, in place (1/1)" in result.stderr
    assert "worker:1 used its 1 restart(s): stopping the group" in result.stderr
    assert "restarting the group (1/1)" in result.stderr, "then the group's own budget decides"
    # Started: once, once alone, once in the group's second attempt (its own budget spent: the attempt fails). The
    # chief's count is not asserted: under load the second attempt may end before the chief got that far.
    assert len(_starts(out, "worker-1")) == 3


def test_hang_is_detected_and_reported(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--hang-timeout", "1", "--max-restarts", "0", FAKE, str(out), "--hang", "worker:1",
                    "--sleep", "30")
    assert result.returncode == 3
    assert "worker:1" in result.stderr and "made no progress" in result.stderr
    assert "#0: hung worker:1" in result.stderr


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_to_launcher_stops_every_task(tmp_path, sig, status):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tfdist", "launch", "-n", "2", "--ps", "1", "--chief",
                             "--grace-period", "1", FAKE, str(out), "--sleep", "60", "--spawn-child"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(list(out.glob("*.json"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    got = records(out)
    assert len(got) == 4
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == status, err
    pids = [r["pid"] for r in got.values()] + [r["child_pid"] for r in got.values()]
    assert wait_gone(pids) == []


def test_sigkill_of_launcher_leaves_no_task_alive(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tfdist", "launch", "-n", "2", FAKE, str(out), "--sleep", "60",
                             "--ignore-term"], cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(list(out.glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [r["pid"] for r in records(out).values()]
    assert len(pids) == 2 and alive(pids) == pids
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert wait_gone(pids) == []


def test_dry_run_starts_nothing(tmp_path):
    out = tmp_path / "out"
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = launch("-n", "3", "--dry-run", FAKE, str(out))
    assert result.returncode == 0 and result.stdout.count("command: ") == 3
    assert not out.exists()
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_launcher_metrics_count_restarts_and_task_states(tmp_path):
    from prometheus_client import generate_latest

    from tfdist.launch.spec import LaunchSpec
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.observability.launcher_metrics import LauncherMetrics

    metrics = LauncherMetrics("unit-job")
    spec = LaunchSpec(command=(sys.executable, FAKE, str(tmp_path / "out"), "--fail", "worker:1:4",
                               "--first-attempt-only", "--others-wait"), workers=2, max_restarts=1, backoff=0,
                      log_dir=str(tmp_path / "logs"))
    result = Supervisor(spec, metrics=metrics).run()
    assert result.succeeded
    text = generate_latest(metrics.registry).decode()
    restarts = [line for line in text.splitlines() if line.startswith("tfdist_restarts_total{")]
    assert restarts and restarts[0].endswith(" 1.0"), text
    assert 'task_type="worker"' in text and 'state="exited"' in text, text


def test_restart_uses_warm_spares(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "TFDIST_WARM_PRELOAD": "json"}  # stands in for TensorFlow: fast to import
    result = launch("-n", "2", "--max-restarts", "1", "--backoff", "0", FAKE, str(out), "--fail", "worker:1:5",
                    "--fail-delay", "1.5", "--first-attempt-only", "--sleep", "3.5", env=env)
    assert result.returncode == 0, result.stderr
    assert "attempt 1: started 2 task(s) (2 from warm spares)" in result.stderr
    got = records(out)
    assert "TFDIST_WARM_START" not in got["worker-0-0"]["env"]
    second = [got["worker-0-1"], got["worker-1-1"]]
    assert all(r["env"].get("TFDIST_WARM_START") == "1" for r in second)
    assert [json.loads(r["tf_config"])["task"]["index"] for r in second] == [0, 1]
    assert all(r["env"]["TFDIST_RESTART_COUNT"] == "1" for r in second)
    assert "hello from worker:1 attempt 1" in result.stdout, "a spare's output is prefixed like any task's"
    # Spares made during the last attempt are not left behind.
    assert wait_gone([r["pid"] for r in got.values()]) == []


@pytest.mark.parametrize("worth,warm", [(2.0, 2), (1000.0, 0)], ids=["long enough", "too short"])
def test_warm_spares_start_only_when_enough_training_is_left(tmp_path, worth, warm):
    """A job that says its length (300 steps of 20 ms, about 6 s) starts warm spares only when the training left at
    its pace is at least ``spares_worth``: the short digits job no longer pays for two TensorFlow imports."""
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.launch.spec import LaunchSpec, Timeouts
    from tfdist.protocol import Command

    said: list[str] = []
    command = Command(FAKE, (str(tmp_path / "out"), "--total-steps", "300", "--fail", "worker:1:5", "--fail-delay",
                             "3", "--first-attempt-only"), interpreter=sys.executable)
    spec = LaunchSpec(command=command, workers=2, max_restarts=1, backoff=0, log_dir=str(tmp_path / "logs"),
                      timeouts=Timeouts(spares_worth=worth))
    result = Supervisor(spec, environ={**os.environ, "TFDIST_WARM_PRELOAD": "json"}, say=said.append).run()
    assert result.succeeded, said
    started = [line for line in said if "attempt 1: started 2 task(s)" in line]
    assert started and (f"({warm} from warm spares)" in started[0]) is bool(warm), said


def test_no_spares_without_restarts(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", FAKE, str(out), "--sleep", "1", env={**os.environ, "TFDIST_WARM_PRELOAD": "json"})
    assert result.returncode == 0 and "warm" not in result.stderr


PHASES = str(REPO_ROOT / "tests" / "bin" / "phase_task.py")


def test_a_stalled_step_is_hung_at_its_learned_threshold_and_the_same_hang_twice_stops_the_job(tmp_path):
    """Steps of 20 ms, a first 3.8 s pause between steps (a phase not seen yet: --hang-timeout applies, though it is
    longer than the steps' learned threshold), then worker:1 stalls in a step: called hung at the learned 3.5 s,
    not after --hang-timeout's 120 s; the second attempt hangs the same way and the job stops with budget left.
    Every step writes its heartbeat (interval 0), so that the steps tell the stalled task from its waiting peer."""
    logs = tmp_path / "logs"
    started = time.monotonic()
    result = launch("-n", "2", "--hang-timeout", "120", "--max-restarts", "5", "--backoff", "0",
                    "--log-dir", str(logs), PHASES, "--pause-at", "20", "--pause", "3.8", "--stall", "worker:1",
                    "--stall-at", "40", "--steps", "100000", timeout=150, env={**os.environ, "TFDIST_HEARTBEAT_INTERVAL": "0"})
    assert result.returncode == 3, result.stderr
    assert time.monotonic() - started < 100, "the learned threshold, not --hang-timeout, called the hangs"
    assert "no step for" in result.stderr and "(p99 " in result.stderr and "threshold 3.0 s" in result.stderr
    assert "the same hang (worker:1 at step 40, in phase_task.py" in result.stderr and "in two attempts in a row" in result.stderr
    assert "#0: hung worker:1" in result.stderr and "#1: hung worker:1" in result.stderr
    assert "#2:" not in result.stderr
    learned = json.loads((logs / "phases.json").read_text())
    assert set(learned["phases"]) >= {"startup", "step", "between"}


def test_a_hang_is_blamed_on_the_task_the_flight_recorder_names_not_the_one_silent_longest(tmp_path):
    """worker:1 starts late and stalls at step 10; worker:0 reached step 11 long before and waits for it (as a peer in
    a collective would), so it is the one silent longest when the watchdog fires. The flight recorder sees worker:1
    behind (step 10 against 11): the report and the launcher's line name worker:1."""
    result = launch("-n", "2", "--hang-timeout", "120", "--max-restarts", "0", "--log-dir", str(tmp_path / "logs"),
                    PHASES, "--stall", "worker:1",
                    "--stall-at", "10", "--stalled-starts-late", "2", "--steps", "100000", timeout=100,
                    env={**os.environ, "TFDIST_HEARTBEAT_INTERVAL": "0"})
    assert result.returncode == 3, result.stderr
    assert "flight recorder: worker:1 stopped first: at step 10 while the others are at step 11" in result.stderr
    assert "#0: hung worker:1" in result.stderr and "tfdist: worker:1 made no progress for 3s" in result.stderr
