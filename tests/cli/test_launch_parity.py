"""Flag parity across machines, as a table over EVERY option of `tfdist launch`: in each multi-machine way in (host
file, rendezvous) a flag either works with its single-machine meaning (seen in the --dry-run plan) or is refused by
name with exit 2. Nothing here starts a process or sends a packet (--dry-run connects to nothing)."""
from __future__ import annotations

import os

from pathlib import Path

import click
import pytest

from tests.conftest import REPO_ROOT
from tfdist.cli.launch import command as launch_command
from tfdist.launch.entry.parity import ACROSS_MACHINES, HOSTFILE, RENDEZVOUS
from tfdist.cli.main import main

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")
MODES = {
    HOSTFILE: ["--hosts", "198.18.0.1:2,198.18.0.2:2"],
    RENDEZVOUS: ["--nnodes", "2", "--rdzv-endpoint", "198.18.0.1:29400", "-n", "2", "--rdzv-insecure",
                 "--rdzv-id", "j"],
}
# What a refusal looks like, and what "works" must show in each way in's plan. {tmp} is the test's folder.
REFUSED = "refused"


def _options() -> list[str]:
    return sorted(p.name for p in launch_command.params if isinstance(p, click.Option) and p.name != "help")


# option -> (its flags set to something other than the default, {mode: expected}), where expected is REFUSED, a
# string the dry run prints, "" (exit 0 is all there is to see), or "!" and what the single-machine meaning refuses
# with (exit 2) on a machine like this one.
CASES: dict[str, tuple[list[str], dict[str, str]]] = {
    "workers": (["-n", "3"], {HOSTFILE: "worker:3", RENDEZVOUS: "3 worker(s)"}),
    # Roles are placed over the machines by node rank (tfdist.cluster.placement); --ps needs --chief as on one machine.
    "ps": (["--ps", "1", "--chief"], {HOSTFILE: "node rank 0: chief:0, ps:0", RENDEZVOUS: "node0: chief:0 ps:0"}),
    "chief": (["--chief"], {HOSTFILE: "node rank 0: chief:0, worker:0", RENDEZVOUS: "node0: chief:0 worker:0"}),
    "evaluator": (["--evaluator"], {HOSTFILE: "node rank 0: evaluator:0, worker:0",
                                    RENDEZVOUS: "[evaluator:0]"}),
    "max_restarts": (["--max-restarts", "4"], {HOSTFILE: "up to 4", RENDEZVOUS: "TFDIST_MAX_RESTARTS=4"}),
    "restart_window": (["--restart-window", "60"], {HOSTFILE: "within 60s", RENDEZVOUS: "within 60s"}),
    "backoff": (["--backoff", "5"], {HOSTFILE: "5s before the first", RENDEZVOUS: "5s before the first"}),
    "log_dir": (["--log-dir", "{tmp}/logs"], {HOSTFILE: "--log-dir {tmp}/logs",
                                              RENDEZVOUS: "{tmp}/logs/attempt-0/worker-0.heartbeat"}),
    "tee": (["--tee", "--log-dir", "{tmp}/logs"], {HOSTFILE: "--tee", RENDEZVOUS: "output: shown here"}),
    "port_base": (["--port-base", "45000"], {HOSTFILE: "--port-base 45000", RENDEZVOUS: "ports 45000-45001"}),
    "host": (["--host", "0.0.0.0"], {HOSTFILE: REFUSED, RENDEZVOUS: REFUSED}),
    "env_pairs": (["--env", "FOO=bar"], {HOSTFILE: "--env FOO=bar", RENDEZVOUS: "  FOO=bar"}),
    # No GPU on a test machine: refused as on one machine (rendezvous); a host's agent checks its own GPUs.
    "gpus_per_task": (["--gpus-per-task", "1"], {HOSTFILE: "--gpus-per-task 1", RENDEZVOUS: "!no GPU is visible"}),
    "nccl_debug": (["--nccl-debug"], {HOSTFILE: "--nccl-debug", RENDEZVOUS: "NCCL_DEBUG=INFO"}),
    "tf_log_level": (["--tf-log-level", "warning"], {HOSTFILE: "--tf-log-level warning",
                                                     RENDEZVOUS: "TF_CPP_MIN_LOG_LEVEL=1"}),
    "grace_period": (["--grace-period", "7"], {HOSTFILE: "--grace-period 7.0", RENDEZVOUS: "grace 7s"}),
    "hang_timeout": (["--hang-timeout", "70"], {HOSTFILE: "--hang-timeout 70.0", RENDEZVOUS: "hang 70s"}),
    "metrics_port": (["--metrics-port", "9100"], {HOSTFILE: "--metrics-port 9100",
                                                  RENDEZVOUS: "TFDIST_METRICS_PORT=9101"}),
    "metrics_host": (["--metrics-host", "0.0.0.0", "--metrics-port", "9100"],
                     {HOSTFILE: "--metrics-host 0.0.0.0", RENDEZVOUS: "TFDIST_METRICS_HOST=0.0.0.0"}),
    "launcher_metrics_port": (["--launcher-metrics-port", "9200"], {HOSTFILE: "--launcher-metrics-port 9200",
                                                                    RENDEZVOUS: "launcher metrics: 127.0.0.1:9200"}),
    "job_name": (["--job-name", "label7"], {HOSTFILE: "--job-name label7", RENDEZVOUS: "TFDIST_JOB_NAME=label7"}),
    "allow_keras3": (["--allow-keras3"], {HOSTFILE: "--allow-keras3", RENDEZVOUS: ""}),
    "warm_spares": (["--no-warm-spares"], {HOSTFILE: "--no-warm-spares", RENDEZVOUS: ""}),
    "thread_caps": (["--thread-caps"], {HOSTFILE: "--thread-caps", RENDEZVOUS: "OMP_NUM_THREADS="}),
    "flight_recorder": (["--no-flight-recorder"], {HOSTFILE: "--no-flight-recorder", RENDEZVOUS: ""}),
    "firewall": (["--firewall"], {HOSTFILE: "--firewall", RENDEZVOUS: ""}),  # each agent loads its own table
    "bootstrap": (["--no-bootstrap"], {HOSTFILE: REFUSED, RENDEZVOUS: REFUSED}),
    "restart_after_training": (["--restart-after-training"], {HOSTFILE: REFUSED, RENDEZVOUS: REFUSED}),
    "live": (["--live"], {HOSTFILE: REFUSED, RENDEZVOUS: ""}),
    "module": (["-m"], {HOSTFILE: "-m -- json.tool", RENDEZVOUS: "-u -m json.tool"}),
    "no_python": (["--no-python"], {HOSTFILE: "--no-python -- /bin/true", RENDEZVOUS: "command: /bin/true"}),
    "dry_run": ([], {HOSTFILE: "none started, no connection made", RENDEZVOUS: "none started, no connection made"}),
    "hostfile": (["--hostfile", "{tmp}/hosts"], {HOSTFILE: "[host 198.18.0.7]", RENDEZVOUS: "two ways in"}),
    "hosts": (["--hosts", "198.18.0.8"], {HOSTFILE: "[host 198.18.0.8]", RENDEZVOUS: "two ways in"}),
    "host_discovery_script": (["--host-discovery-script", "{tmp}/discover.sh"], {HOSTFILE: "[host 198.18.0.6]",
                                                                               RENDEZVOUS: "two ways in"}),
    "host_cooldown_range": (["--host-cooldown-range", "2:8"], {HOSTFILE: "", RENDEZVOUS: REFUSED}),
    "include": (["--include", "198.18.0.2"], {HOSTFILE: "1 host(s)", RENDEZVOUS: REFUSED}),
    "exclude": (["--exclude", "198.18.0.2"], {HOSTFILE: "1 host(s)", RENDEZVOUS: REFUSED}),
    "min_nodes": (["--min-nodes", "1"], {HOSTFILE: "(1 needed to train)", RENDEZVOUS: REFUSED}),
    "nnodes": (["--nnodes", "1:2"], {HOSTFILE: "two ways in", RENDEZVOUS: "1:2 machine(s)"}),
    "rdzv_endpoint": (["--rdzv-endpoint", "198.18.0.3:29500"], {HOSTFILE: "two ways in",
                                                                RENDEZVOUS: "rendezvous 198.18.0.3:29500"}),
    "rdzv_backend": (["--rdzv-backend", "etcd"], {HOSTFILE: REFUSED, RENDEZVOUS: "rendezvous 198.18.0.1:29400"}),
    # Without --rdzv-backend etcd, the rendezvous way in refuses it as the etcd backend's own check does.
    "rdzv_conf": (["--rdzv-conf", "prefix=/x"], {HOSTFILE: REFUSED, RENDEZVOUS: "!is for --rdzv-backend etcd"}),
    "rdzv_secret_file": (["--rdzv-secret-file", "{tmp}/secret"], {HOSTFILE: REFUSED, RENDEZVOUS: "job "}),
    "rdzv_insecure": (["--rdzv-insecure", "--rdzv-id", "open"], {HOSTFILE: REFUSED, RENDEZVOUS: "job open"}),
    "rdzv_id": (["--rdzv-id", "job42"], {HOSTFILE: "--rdzv-id job42", RENDEZVOUS: "job job42"}),
    "node_rank": (["--node-rank", "1"], {HOSTFILE: REFUSED, RENDEZVOUS: "[worker:2]"}),
    "node_address": (["--node-address", "198.18.0.9"], {HOSTFILE: REFUSED, RENDEZVOUS: "address 198.18.0.9"}),
    "node_name": (["--node-name", "m9"], {HOSTFILE: REFUSED, RENDEZVOUS: "name m9"}),
    "node_roles": (["--node-roles", "ps", "--ps", "1", "--chief"], {HOSTFILE: REFUSED, RENDEZVOUS: "[ps:0]"}),
    "node_timeout": (["--node-timeout", "4"], {HOSTFILE: "--node-timeout 4.0", RENDEZVOUS: "node 4s"}),
    "rdzv_timeout": (["--rdzv-timeout", "40"], {HOSTFILE: "--rdzv-timeout 40.0", RENDEZVOUS: "rendezvous 40s"}),
    "rdzv_last_call": (["--rdzv-last-call", "2"], {HOSTFILE: "--rdzv-last-call 2.0", RENDEZVOUS: "last call 2s"}),
    "checkpoint_dir": (["--checkpoint-dir", "{tmp}/ckpt"], {HOSTFILE: "--checkpoint-dir {tmp}/ckpt",
                                                            RENDEZVOUS: "in {tmp}/ckpt is copied"}),
    "agent_watch_stdin": (["--agent-watch-stdin"], {HOSTFILE: REFUSED, RENDEZVOUS: ""}),
}


def test_every_option_has_a_row_and_a_case():
    options = _options()
    assert sorted(ACROSS_MACHINES) == options, "add the new flag to tfdist.launch.entry.parity.ACROSS_MACHINES"
    assert sorted(CASES) == options, "add the new flag to CASES here"
    for name, (_, expected) in CASES.items():
        for mode in MODES:
            table_refuses = ACROSS_MACHINES[name][mode] is not None
            assert table_refuses == (expected[mode] == REFUSED) or expected[mode].startswith(("two ways in", "!")), \
                (name, mode)


def _target(name: str) -> list[str]:
    return {"module": ["json.tool"], "no_python": ["/bin/true"]}.get(name, [FAKE, "x"])


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_flag_works_across_machines_or_is_refused_by_name(tmp_path: Path, monkeypatch, capsys, name, mode):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts").write_text("198.18.0.7 slots=1\n")
    flags, expected = CASES[name]
    flags = [f.replace("{tmp}", str(tmp_path)) for f in flags]
    want = expected[mode].replace("{tmp}", str(tmp_path))
    (tmp_path / "discover.sh").write_text("#!/bin/sh\necho 198.18.0.6 slots=1\n")
    (tmp_path / "discover.sh").chmod(0o755)
    base = [] if name in ("hostfile", "hosts", "host_discovery_script") and mode == HOSTFILE else MODES[mode]
    if name == "nnodes" and mode == RENDEZVOUS:
        base = ["--rdzv-endpoint", "198.18.0.1:29400", "-n", "2", "--rdzv-insecure", "--rdzv-id", "j"]
    if name == "rdzv_endpoint" and mode == RENDEZVOUS:
        base = ["--nnodes", "2", "-n", "2", "--rdzv-insecure", "--rdzv-id", "j"]
    if name in ("rdzv_secret_file", "rdzv_insecure") and mode == RENDEZVOUS:
        base = ["--nnodes", "2", "--rdzv-endpoint", "198.18.0.1:29400", "-n", "2"]
        (tmp_path / "secret").write_text(os.urandom(32).hex())  # random: a pattern is refused (issue 34)
        (tmp_path / "secret").chmod(0o600)
    rc = main(["launch", *base, *flags, "--dry-run", "--", *_target(name)])
    out, err = capsys.readouterr()
    if want.startswith("!"):
        assert rc == 2 and want[1:] in err and flags[0] in err and len(err.strip().splitlines()) == 1
    elif want in (REFUSED, "two ways in"):
        assert rc == 2, out
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        shown = flags[0] if want == REFUSED else "two ways in"
        assert shown in err, err
        assert "dry run" not in out
    else:
        assert rc == 0, err
        assert "none started, no connection made" in out
        assert want in out, out


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("pair", ["TF_CONFIG={}", "TFDIST_TASK_INDEX=3"])
def test_protocol_variables_in_env_are_refused_before_anything_starts(capsys, mode, pair):
    # Not a dry run: the refusal comes before any ssh session or rendezvous connection.
    assert main(["launch", *MODES[mode], "--env", pair, "--", FAKE, "x"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and pair.split("=")[0] in err and "--env" in err


def test_a_flag_from_its_environment_twin_is_refused_naming_the_twin(monkeypatch, capsys):
    monkeypatch.setenv("TFDIST_LAUNCH_HOST", "0.0.0.0")
    assert main(["launch", *MODES[RENDEZVOUS], "--dry-run", "--", FAKE, "x"]) == 2
    assert "TFDIST_LAUNCH_HOST" in capsys.readouterr().err


def test_help_speaks_of_machines_not_only_this_one(capsys):
    assert main(["launch", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "on this machine or across machines" in text and "--hostfile" in text
