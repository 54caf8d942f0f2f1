"""Each Slurm task's metrics port and bind address (pure rule, table-tested), the sbatch lines that ask for them,
and the agreement with the scrape config's targets."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tfdist.deploy.monitor import ScrapeSpec, slurm_targets
from tfdist.deploy.slurm import SlurmJobSpec, render_sbatch
from tfdist.errors import UsageError
from tfdist.cluster.slurm_metrics import metrics_environment

NAMES = {"node1": ["198.18.0.11"], "lo-only": ["127.0.1.1"], "dual": ["::1", "198.18.0.12"],
         "v6": ["fd00::5"]}


def table_resolver(name: str) -> list[str]:
    if name not in NAMES:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return NAMES[name]


def task(local_id: str = "0", node: str = "node1", **extra: str) -> dict[str, str]:
    env = {"SLURM_PROCID": local_id, "SLURM_LOCALID": local_id, "SLURM_NODEID": "0", "SLURMD_NODENAME": node,
           "SLURM_STEP_TASKS_PER_NODE": "2", "TFDIST_SLURM_METRICS_PORT": "9464"}
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


@pytest.mark.parametrize("environ, expected", [
    ({}, {}),  # no metrics asked for: nothing added
    (task("0"), {"TFDIST_METRICS_PORT": "9464", "TFDIST_METRICS_HOST": "198.18.0.11"}),
    (task("1"), {"TFDIST_METRICS_PORT": "9465", "TFDIST_METRICS_HOST": "198.18.0.11"}),
    # The node's name resolves only to loopback (Debian's 127.0.1.1): bind every interface instead.
    (task("0", node="lo-only"), {"TFDIST_METRICS_PORT": "9464", "TFDIST_METRICS_HOST": "0.0.0.0"}),
    (task("0", node="dual"), {"TFDIST_METRICS_PORT": "9464", "TFDIST_METRICS_HOST": "198.18.0.12"}),
    (task("0", node="v6"), {"TFDIST_METRICS_PORT": "9464", "TFDIST_METRICS_HOST": "fd00::5"}),
    (task("0", node="unknown"), {"TFDIST_METRICS_PORT": "9464", "TFDIST_METRICS_HOST": "0.0.0.0"}),
    (task("0", node=""), {"TFDIST_METRICS_PORT": "9464", "TFDIST_METRICS_HOST": "0.0.0.0"}),
    (task("1", TFDIST_SLURM_METRICS_HOST="198.18.0.99"),
     {"TFDIST_METRICS_PORT": "9465", "TFDIST_METRICS_HOST": "198.18.0.99"}),
    # A port set by hand with one task per node cannot collide: left alone.
    ({"SLURM_PROCID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_NODEID": "1", "TFDIST_METRICS_PORT": "9000"},
     {}),
])
def test_each_task_gets_its_port_and_address(environ, expected):
    assert metrics_environment(environ, table_resolver) == expected


@pytest.mark.parametrize("environ, message", [
    (task("0", TFDIST_SLURM_METRICS_PORT="94x"), "TFDIST_SLURM_METRICS_PORT='94x' is not a number"),
    ({"TFDIST_SLURM_METRICS_PORT": "9464"}, "SLURM_LOCALID is not"),
    (task("1", TFDIST_SLURM_METRICS_PORT="65535"), "TFDIST_SLURM_METRICS_PORT=65535 + local task 1 is not a TCP"),
    (task("0", TFDIST_SLURM_METRICS_HOST="$(id)"), "TFDIST_SLURM_METRICS_HOST='$(id)' is not a host"),
    ({"SLURM_PROCID": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NODEID": "1", "TFDIST_METRICS_PORT": "9000"},
     "TFDIST_METRICS_PORT=9000 is inherited by the 2 tasks on this node"),
])
def test_bad_settings_name_the_variable(environ, message):
    with pytest.raises(UsageError) as raised:
        metrics_environment(environ, table_resolver)
    assert message in raised.value.one_line()


def test_ports_are_the_ones_the_scrape_config_targets():
    """The two halves of one layout: what tasks bind and what Prometheus is told to scrape."""
    tasks_per_node = 3
    bound = set()
    for node in ("node1", "lo-only"):
        for local in range(tasks_per_node):
            env = metrics_environment(task(str(local), node=node, SLURM_STEP_TASKS_PER_NODE=str(tasks_per_node)),
                                      table_resolver)
            bound.add(f"{node}:{env['TFDIST_METRICS_PORT']}")
    scraped = {t for group in slurm_targets(ScrapeSpec(target="slurm", port=9464, tasks=tasks_per_node,
                                                       nodes=("node1", "lo-only"))) for t in group["targets"]}
    assert bound == scraped


def test_sbatch_exports_the_base_port_and_host():
    text = render_sbatch(SlurmJobSpec(script="train.py", tasks_per_node=2, metrics_port=9464, metrics_host="0.0.0.0"))
    assert "export TFDIST_SLURM_METRICS_PORT=9464\n" in text
    assert "export TFDIST_SLURM_METRICS_HOST=0.0.0.0\n" in text
    plain = render_sbatch(SlurmJobSpec(script="train.py"))
    assert "METRICS" not in plain


@pytest.mark.parametrize("kwargs, message", [
    ({"metrics_port": 65535, "tasks_per_node": 2}, "--metrics-port 65535 leaves no room for 2 port(s)"),
    ({"metrics_port": 9464, "metrics_host": "a b"}, "--metrics-host 'a b' is not a host name"),
    ({"metrics_host": "0.0.0.0"}, "--metrics-host needs --metrics-port"),
])
def test_bad_flags_are_named(kwargs, message):
    with pytest.raises(UsageError) as raised:
        SlurmJobSpec(script="train.py", **kwargs)
    assert message in raised.value.one_line()


def test_tf_config_exec_gives_the_task_its_port():
    """Through the real `tf-config --exec`: the exec'd program sees its own port and the host asked for."""
    host = socket.gethostname().split(".")[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "TFDIST_", "TF_"))}
    env.update({"SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": host, "SLURM_STEP_TASKS_PER_NODE": "2",
                "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_JOB_ID": "5",
                "SLURMD_NODENAME": host, "TFDIST_SLURM_METRICS_PORT": "9464",
                "TFDIST_SLURM_METRICS_HOST": "127.0.0.1"})
    show = "import os; print(os.environ['TFDIST_METRICS_PORT'], os.environ['TFDIST_METRICS_HOST'])"
    result = subprocess.run([sys.executable, "-m", "tfdist", "tf-config", "--exec", "--", sys.executable, "-c", show],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["9465", "127.0.0.1"]
    env["TFDIST_SLURM_METRICS_PORT"] = "65535"
    result = subprocess.run([sys.executable, "-m", "tfdist", "tf-config", "--exec", "--", "true"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "TFDIST_SLURM_METRICS_PORT=65535 + local task 1 is not a TCP port" in result.stderr
