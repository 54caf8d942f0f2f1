"""A stand-in training task for launcher tests (no TensorFlow): behaves as its arguments say, per task.

    fake_task.py OUT_DIR [--fail TASK:CODE] [--raise TASK] [--sleep S] [--hang TASK]
                 [--first-attempt-only] [--spawn-child] [--detach-child] [--startup-delay S] [--chatter N]
                 [--total-steps N] [--fail-starts N]

Writes OUT_DIR/<type>-<index>-<attempt>.json with the TF_CONFIG and environment it saw, and its pid.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src"))
from tfdist import runtime  # noqa: E402  (installs the error hook, like a real script)
from tfdist.runtime.reporting import Heartbeat  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--fail", action="append", default=[], help="TASK:CODE, e.g. worker:1:3")
    p.add_argument("--raise", dest="raise_in", action="append", default=[])
    p.add_argument("--sleep", type=float, default=0.2)
    p.add_argument("--hang", action="append", default=[])
    p.add_argument("--first-attempt-only", action="store_true")
    p.add_argument("--spawn-child", action="store_true", help="start a grandchild that sleeps")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--bind", action="store_true", help="bind this task's TF_CONFIG address, as a TF server would")
    p.add_argument("--fail-delay", type=float, default=0.0, help="send heartbeats this long before failing")
    p.add_argument("--detach-child", action="store_true", help="start a grandchild in its own session (setsid)")
    p.add_argument("--startup-delay", type=float, default=0.0, help="sleep this long first, as a TF import would")
    p.add_argument("--chatter", type=int, default=0, help="print this many 1 kB lines to stdout and stderr")
    p.add_argument("--abort-like-no-threads", action="append", default=[],
                   help="TASK: die as a C++ runtime that could not create a thread does (SIGABRT)")
    p.add_argument("--others-wait", action="store_true",
                   help="in an attempt where --fail/--raise names another task, wait (up to 60 s) to be stopped "
                        "instead of finishing: the failure then always comes first, however slowly tasks start")
    p.add_argument("--first-attempt-waits", action="store_true",
                   help="in attempt 0, a task that started wait (up to 60 s) to be stopped: whatever fails in that "
                        "attempt (a stolen port) always ends it first, however slowly the other tasks start")
    p.add_argument("--total-steps", type=int, default=None,
                   help="train this many 20 ms steps (instead of --sleep), reporting the total and a falling loss")
    p.add_argument("--fail-starts", type=int, default=None,
                   help="with --fail: fail only the task's first N starts, counted over attempts and restarts in "
                        "OUT_DIR/<type>-<index>.starts (one pid a line)")
    p.add_argument("--wait-starts", default=None,
                   help="TYPE-INDEX:N: every other task waits (up to 60 s) for that task's N-th start before finishing")
    args = p.parse_args()
    if args.startup_delay:
        print("starting up", flush=True)
        time.sleep(args.startup_delay)

    info = runtime.cluster_info()
    me = f"{info.task_type}:{info.task_index}"
    if args.bind and info.task_type != "evaluator":
        import socket

        host, port = info.cluster[info.task_type][info.task_index].rsplit(":", 1)
        host = host.strip("[]")  # an IPv6 address is written in brackets
        server = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        try:
            server.bind((host, int(port)))
        except OSError as bad:
            print(f"E0000 server.cc: Failed to add port {port}: {bad.strerror} (Address already in use)",
                  file=sys.stderr, flush=True)
            return 1
    attempt = int(os.environ.get("TFDIST_RESTART_COUNT", "0"))
    os.makedirs(args.out_dir, exist_ok=True)
    record = {"task": me, "pid": os.getpid(), "attempt": attempt, "tf_config": os.environ.get("TF_CONFIG"),
              "env": {k: v for k, v in os.environ.items() if k.startswith(("TFDIST_", "TF_", "CUDA_", "NCCL_", "MY_"))}}
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        record["child_pid"] = child.pid
    if args.detach_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        record["child_pid"] = child.pid
    path = os.path.join(args.out_dir, f"{info.task_type}-{info.task_index}-{attempt}.json")
    with open(path + ".tmp", "w") as f:  # whole or not at all: tests read these while tasks start
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    print(f"hello from {me} attempt {attempt}", flush=True)
    with open(os.path.join(args.out_dir, f"{info.task_type}-{info.task_index}.starts"), "a") as f:
        f.write(f"{os.getpid()}\n")
    with open(os.path.join(args.out_dir, f"{info.task_type}-{info.task_index}.starts")) as f:
        starts = len(f.read().split())
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    for i in range(args.chatter):
        print(f"line {i} " + "x" * 1000, flush=True)
        print(f"err {i} " + "y" * 1000, file=sys.stderr, flush=True)
    active = not args.first_attempt_only or attempt == 0
    heartbeat = Heartbeat(min_interval=0.0, total_steps=args.total_steps)
    if active and me in args.hang:
        heartbeat.beat(1)
        time.sleep(3600)
    if active and me in args.abort_like_no_threads:
        print("terminate called after throwing an instance of 'std::system_error'\n"
              "  what():  Resource temporarily unavailable", file=sys.stderr, flush=True)
        os.abort()
    if active and me in args.raise_in:
        raise ValueError(f"boom in {me}")
    for spec in args.fail:
        task, _, code = spec.rpartition(":")
        if active and task == me and (args.fail_starts is None or starts <= args.fail_starts):
            until = time.monotonic() + args.fail_delay
            beats = 0
            while time.monotonic() < until:
                beats += 1
                heartbeat.beat(beats)  # training steps go by until the failure
                time.sleep(0.02)
            print(f"{me} failing with {code}", file=sys.stderr, flush=True)
            return int(code)
    failing = {spec.rpartition(":")[0] for spec in args.fail} | set(args.raise_in)
    if active and args.others_wait and failing - {me}:
        time.sleep(60)  # the launcher stops this task once the failing one has failed
    if args.first_attempt_waits and attempt == 0:
        time.sleep(60)  # the launcher stops this task once another one failed
    if info.task_type == "ps":
        time.sleep(3600)  # parameter servers serve until stopped
    deadline = time.monotonic() + args.sleep
    step = 0
    while (step < args.total_steps) if args.total_steps is not None else (time.monotonic() < deadline):
        step += 1
        heartbeat.beat(step, loss=1.0 / step, examples=32 * step)
        time.sleep(0.02)
    if args.wait_starts is not None and args.wait_starts.rpartition(":")[0] != me.replace(":", "-"):
        name, _, count = args.wait_starts.rpartition(":")
        until = time.monotonic() + 60
        while time.monotonic() < until:
            try:
                with open(os.path.join(args.out_dir, f"{name}.starts")) as f:
                    if len(f.read().split()) >= int(count):
                        break
            except OSError:
                pass
            time.sleep(0.05)
    if args.total_steps is not None:
        heartbeat.finished(step, loss=1.0 / step, examples=32 * step)
    if info.task_type == "evaluator":
        time.sleep(3600)
    print(f"{me} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
