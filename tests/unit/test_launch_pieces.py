from __future__ import annotations

import socket

import pytest

from tfdist.errors import UsageError
from tfdist.launch.outcome import Attempt, Cause, LaunchResult, TaskFailure, describe_exit, render_report
from tfdist.protocol import ErrorRecord
from tfdist.launch.local.ports import free_ports, ports_from_base
from tfdist.launch.local.command_check import keras_plan, resolve_command
from tfdist.launch.spec import LaunchSpec
from tfdist.launch.local.taskenv import assign_gpus, visible_gpus
from tfdist.launch.options import parse_env_pairs
from tfdist.launch.local.layout import TaskId


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_port_base_refuses_a_taken_port():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with pytest.raises(UsageError, match=str(taken)):
            ports_from_base(taken, 2)


def test_port_base_out_of_range():
    with pytest.raises(UsageError, match="--port-base"):
        ports_from_base(65535, 3)


def test_gpus_split_evenly_and_ps_gets_none():
    tasks = [TaskId("chief", 0), TaskId("worker", 0), TaskId("ps", 0)]
    got = assign_gpus(tasks, ["0", "1", "2", "3"], None)
    assert got == {TaskId("chief", 0): "0,1", TaskId("worker", 0): "2,3", TaskId("ps", 0): ""}
    assert assign_gpus(tasks, [], None) == {}
    with pytest.raises(UsageError, match="--gpus-per-task"):
        assign_gpus(tasks, ["0", "1"], 2)


def test_visible_gpus_from_cuda_visible_devices_and_fake_nvidia_smi(tmp_path):
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    assert visible_gpus({"PATH": str(tmp_path)}) == ["0", "1"]
    assert visible_gpus({"PATH": str(tmp_path / "none")}) == []


@pytest.mark.parametrize("bad", ["NOEQUALS", "=x", "A B=1"])
def test_env_pairs_errors_name_the_flag(bad):
    with pytest.raises(UsageError, match="--env"):
        parse_env_pairs([bad])


def test_env_pairs_keep_equals_in_values():
    assert parse_env_pairs(["A=1", "B=x=y"]) == (("A", "1"), ("B", "x=y"))


def test_resolve_command(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("")
    assert resolve_command([str(script), "--x"], module=False, no_python=False, python="py").argv() == \
        ["py", "-u", str(script), "--x"]
    assert resolve_command(["pkg.mod"], module=True, no_python=False, python="py").argv() == ["py", "-u", "-m", "pkg.mod"]
    with pytest.raises(UsageError, match="does not exist"):
        resolve_command([str(tmp_path / "nope.py")], module=False, no_python=False)
    with pytest.raises(UsageError, match="no training script"):
        resolve_command([], module=False, no_python=False)


def test_keras_plan_user_choice_wins():
    spec = LaunchSpec(command=("x",), workers=2)
    assert keras_plan(spec, {"TF_USE_LEGACY_KERAS": "0"}) is False


def test_describe_exit_names_signals():
    assert describe_exit(-9) == "killed by SIGKILL"
    assert describe_exit(3) == "exit code 3"


def test_report_leads_with_root_cause_and_lists_attempts():
    failure = TaskFailure(task="worker:1", pid=42, exit_code=1, log_path="/l/worker-1.log",
                          error=ErrorRecord(type="ValueError", message="boom", traceback="Traceback...\nValueError: boom"))
    result = LaunchResult(run_id="abc", log_dir="/l", attempts=[
        Attempt(0, Cause.HUNG, 3.0, failure=failure, step_reached=7, detail="no heartbeat for 2s"),
        Attempt(1, Cause.TASK_FAILED, 1.5, failure=failure),
    ])
    text = render_report(result)
    assert "#0: hung worker:1" in text and "step 7" in text
    assert "root cause (attempt #1): worker:1 (pid 42) exit code 1: ValueError: boom" in text
    assert text.rstrip().endswith("ValueError: boom")


def test_thread_caps_share_the_cores_and_yield_to_the_user():
    from tfdist.launch.local.taskenv import shared_env, thread_caps

    spec = LaunchSpec(command=("x",), workers=2, thread_caps=True)
    assert thread_caps(spec, cores=8) == {"TF_NUM_INTEROP_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4",
                                          "OMP_NUM_THREADS": "4"}
    assert thread_caps(LaunchSpec(command=("x",), workers=3, thread_caps=True), cores=2)["OMP_NUM_THREADS"] == "1"
    assert thread_caps(LaunchSpec(command=("x",), workers=2), cores=8) == {}, "opt-in"
    env = shared_env(LaunchSpec(command=("x",), workers=2, thread_caps=True, env=(("OMP_NUM_THREADS", "3"),)),
                     None, environ={"TF_NUM_INTRAOP_THREADS": "2"})
    assert env["OMP_NUM_THREADS"] == "3" and "TF_NUM_INTRAOP_THREADS" not in env
