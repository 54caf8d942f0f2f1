"""Fixed behaviour of the launcher with real processes (a stand-in task, no TensorFlow): stops at any moment, a
program that cannot start, every port checked up front, protocol variables refused, nothing left behind."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.faultlib import survivors

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
# Generous bounds: they tell "stopped at once" from "waited out a 600 s grace", never time a stop precisely.
PATIENCE = 60


def launch(*args: str, timeout: float = PATIENCE, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfdist", "launch", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT, **kw)


def start(*args: str, env: dict | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tfdist", "launch", *args], cwd=REPO_ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            stdin=subprocess.DEVNULL)  # never a terminal: the launcher words its stops for one


def wait_for(predicate, timeout: float = PATIENCE):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met")


def records(out: Path) -> list[dict]:
    found = []
    for path in out.glob("*.json"):
        try:
            found.append(json.loads(path.read_text()))
        except ValueError:
            pass
    return found


def wait_gone(pids: list[int], timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and survivors(pids):
        time.sleep(0.05)
    return survivors(pids)


def all_pids(out: Path) -> list[int]:
    return [pid for r in records(out) for pid in (r["pid"], r.get("child_pid")) if pid]


def stderr_lines(proc: subprocess.Popen[str], want: str, sink: list[str]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        sink.append(line)
        if want in line:
            return
    raise AssertionError(f"launcher ended without printing {want!r}: {''.join(sink)}")


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_during_the_restart_backoff(tmp_path, sig, status):
    out = tmp_path / "out"
    proc = start("-n", "2", "--max-restarts", "2", "--backoff", "25", FAKE, str(out), "--fail", "worker:1:5",
                 "--first-attempt-only", "--sleep", "30")
    seen: list[str] = []
    stderr_lines(proc, "restarting the group (1/2) in 25.0s", seen)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == status, "".join(seen) + err
    assert "did not succeed" in err and "restart back-off" in err
    assert wait_gone(all_pids(out)) == []


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_stop_before_the_first_heartbeat_skips_the_grace_period(tmp_path, sig, status):
    out = tmp_path / "out"
    # The tasks ignore SIGTERM and the grace period is 600 s: only skipping it lets the launcher end in time.
    proc = start("-n", "2", "--grace-period", "600", FAKE, str(out), "--startup-delay", "600", "--ignore-term",
                 "--spawn-child")
    seen: list[str] = []
    stderr_lines(proc, "attempt 0: started 2 task(s)", seen)
    wait_for(lambda: (tmp_path / "out").exists() or True)
    time.sleep(0.5)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == status, err
    # Not a terminal's Ctrl-C: the second signal is named as it is (SIGTERM from a scheduler, SIGINT from a script).
    assert f"a second {signal.Signals(sig).name} kills them now" in err and "Ctrl-C" not in err


def test_second_ctrl_c_kills_at_once_and_leaves_no_children(tmp_path):
    out = tmp_path / "out"
    proc = start("-n", "2", "--grace-period", "600", FAKE, str(out), "--sleep", "600", "--ignore-term",
                 "--spawn-child")
    wait_for(lambda: len(records(out)) == 2)
    pids = all_pids(out)
    assert len(pids) == 4
    seen: list[str] = []
    proc.send_signal(signal.SIGINT)
    # No terminal here (stdin is not a tty): the launcher must not speak of "Ctrl-C" to a script's SIGINT.
    stderr_lines(proc, "a second SIGINT kills them now", seen)
    assert "Ctrl-C" not in "".join(seen)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 130, err
    assert "killing every task now" in err
    assert wait_gone(pids) == []


def test_stop_during_a_warm_spare_hand_off(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "TFDIST_WARM_PRELOAD": "json"}
    proc = start("-n", "2", "--max-restarts", "1", "--backoff", "0", "--grace-period", "600", FAKE, str(out),
                 "--fail", "worker:1:5", "--fail-delay", "1.5", "--first-attempt-only", "--sleep", "600",
                 "--spawn-child", env=env)
    seen: list[str] = []
    stderr_lines(proc, "(2 from warm spares)", seen)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 143, "".join(seen) + err
    assert wait_gone(all_pids(out)) == []


def test_program_that_cannot_start_is_one_line(tmp_path):
    result = launch("--no-python", "--max-restarts", "3", "--", "/etc/hostname")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "start-failed" in line]
    assert len(lines) == 1 and "/etc/hostname" in lines[0]
    assert re.search(r"(Exec format error|Permission denied)", lines[0])
    assert "restarting" not in result.stderr, "a program that cannot start is not retried"


def _busy_port() -> socket.socket:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    return holder


@pytest.mark.parametrize("flag", ["--metrics-port", "--launcher-metrics-port", "--port-base"])
def test_busy_port_is_one_line_naming_its_flag_before_anything_starts(tmp_path, flag):
    out = tmp_path / "out"
    with _busy_port() as holder:
        port = holder.getsockname()[1]
        result = launch("-n", "1", flag, str(port), FAKE, str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and f"{flag} " in result.stderr and str(port) in result.stderr
    assert not out.exists(), "no task started"


def test_metrics_port_range_is_checked_up_front(tmp_path):
    result = launch("-n", "2", "--metrics-port", "65535", FAKE, str(tmp_path / "out"))
    assert result.returncode == 2 and "--metrics-port 65535" in result.stderr and "Traceback" not in result.stderr


def test_env_cannot_set_protocol_variables(tmp_path):
    result = launch("--env", "TFDIST_HEARTBEAT_FILE=/tmp/x", FAKE, str(tmp_path / "out"))
    assert result.returncode == 2 and "--env TFDIST_HEARTBEAT_FILE" in result.stderr


def test_log_dir_must_be_a_writable_folder(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("")
    result = launch("--log-dir", str(afile), FAKE, str(tmp_path / "out"))
    assert result.returncode == 2 and "--log-dir" in result.stderr and "Traceback" not in result.stderr


def test_temporary_logs_are_removed_at_the_end(tmp_path):
    result = launch("-n", "1", FAKE, str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    folder = re.search(r"logs in (\S+)", result.stderr).group(1)
    assert not os.path.exists(folder)


def test_ipv6_loopback_host(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--host", "::1", FAKE, str(out), "--bind")
    assert result.returncode == 0, result.stderr
    config = json.loads(records(out)[0]["tf_config"])
    assert all(address.startswith("[::1]:") for address in config["cluster"]["worker"])


def test_non_loopback_host_is_warned_about(tmp_path):
    result = launch("-n", "1", "--host", "0.0.0.0", "--dry-run", FAKE, str(tmp_path / "out"))
    assert result.returncode == 0  # a dry run only plans
    result = launch("-n", "1", "--metrics-host", "0.0.0.0", FAKE, str(tmp_path / "out"))
    assert result.returncode == 0 and "warning: --metrics-host 0.0.0.0" in result.stderr


def test_sigkill_of_the_launcher_leaves_no_grandchild(tmp_path):
    out = tmp_path / "out"
    proc = start("-n", "2", FAKE, str(out), "--sleep", "600", "--ignore-term", "--detach-child")
    wait_for(lambda: len(records(out)) == 2)
    pids = all_pids(out)
    assert len(pids) == 4 and survivors(pids) == pids
    proc.kill()
    proc.communicate(timeout=PATIENCE)
    assert wait_gone(pids) == [], "tasks and their detached children die with the launcher"


def test_detached_grandchild_is_killed_when_the_job_ends(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", FAKE, str(out), "--sleep", "0.5", "--detach-child")
    assert result.returncode == 0, result.stderr
    assert wait_gone(all_pids(out)) == []


@pytest.fixture
def tiny_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_under_log_dir_never_blocks_a_task(tmp_path, tiny_disk):
    out = tmp_path / "out"
    result = launch("-n", "2", "--log-dir", str(tiny_disk / "logs"), FAKE, str(out), "--chatter", "300",
                    "--sleep", "0.2")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("cannot write the log of") <= 2  # once per task at most
    assert "cannot write the log of" in result.stderr and "No space left on device" in result.stderr
    assert {r["task"] for r in records(out)} == {"worker:0", "worker:1"}


def test_an_abort_for_lack_of_threads_is_reported_as_transient_and_retried(tmp_path):
    out = tmp_path / "out"
    result = launch("-n", "2", "--max-restarts", "1", "--backoff", "0", FAKE, str(out),
                    "--abort-like-no-threads", "worker:1", "--first-attempt-only", "--sleep", "0.5")
    assert result.returncode == 0, result.stderr
    assert "the failure looked transient; restarting the group (1/1)" in result.stderr
    assert re.search(r"attempt #0 failed in a way that looked transient \(worker:1 \(pid \d+\) killed by SIGABRT\); "
                     r"retried", result.stderr)
    failed = launch("-n", "2", "--max-restarts", "0", FAKE, str(out), "--abort-like-no-threads", "worker:1")
    assert failed.returncode == 3 and "(looked transient)" in failed.stderr


def test_a_signal_during_the_poll_is_announced_before_the_grace_wait(tmp_path, monkeypatch):
    """A signal between the watch loop's announcement and its stop check was announced only after the grace period
    (600 s here): a test waiting for "a second SIGINT kills them now" before sending it waited forever (CI, stop 27).
    The signal is delivered inside the group's poll, as the kernel would at that moment; the supervisor runs in a
    thread, so its handler is called directly."""
    from tfdist.launch.local.group import TaskGroup
    from tfdist.launch.local.supervisor import Supervisor
    from tfdist.launch.spec import LaunchSpec, Timeouts

    spec = LaunchSpec(command=(sys.executable, FAKE, str(tmp_path / "out"), "--sleep", "600", "--ignore-term"),
                      workers=1, max_restarts=0, log_dir=str(tmp_path / "logs"), warm_spares=False,
                      timeouts=Timeouts(grace=600))
    lines: list[str] = []
    supervisor = Supervisor(spec, contain=False, say=lines.append)
    real_poll = TaskGroup.poll

    def poll_then_signal(group, *args, **kwargs):
        snapshot = real_poll(group, *args, **kwargs)
        if snapshot.step and supervisor.stops.cause is None:  # it has trained: the full grace (600 s) applies
            supervisor.stops._on_signal(signal.SIGINT, None)  # after the loop's announcement, before its check
        return snapshot

    monkeypatch.setattr(TaskGroup, "poll", poll_then_signal)
    result: list = []
    runner = threading.Thread(target=lambda: result.append(supervisor.run()), daemon=True)
    runner.start()
    try:
        announced = wait_for_line(lines, "a second SIGINT kills them now")
    finally:
        supervisor.stops._on_signal(signal.SIGINT, None)  # kill now, whatever happened
        runner.join(PATIENCE)
    assert announced, lines
    assert not runner.is_alive() and result and result[0].stopped_by is not None, lines
    assert any("killing every task now" in line for line in lines), lines


def wait_for_line(lines: list[str], want: str, timeout: float = PATIENCE) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(want in line for line in lines):
            return True
        time.sleep(0.05)
    return False
