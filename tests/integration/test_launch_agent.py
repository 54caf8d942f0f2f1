"""The supervisor as a per-machine agent of a bigger job: the cluster comes from outside, only some tasks are local,
and another thread can start a new round with a new cluster (stand-in tasks, no TensorFlow)."""
from __future__ import annotations

import json
import sys
import threading
import time

from tests.conftest import REPO_ROOT
from tfdist.launch.outcome import Cause
from tfdist.launch.local.ports import free_ports
from tfdist.launch.spec import LaunchSpec, Timeouts
from tfdist.launch.local.supervisor import Supervisor
from tfdist.launch.local.layout import ClusterLayout

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def layout(n: int) -> ClusterLayout:
    return ClusterLayout(worker=tuple(f"127.0.0.1:{p}" for p in free_ports(n)))


def test_agent_runs_only_its_tasks_of_a_given_cluster(tmp_path):
    out, cluster = tmp_path / "out", layout(3)
    spec = LaunchSpec(command=(sys.executable, FAKE, str(out)), workers=3, cluster=cluster,
                      local_tasks=("worker:1", "worker:2"), log_dir=str(tmp_path / "logs"))
    result = Supervisor(spec, contain=False).run()
    assert result.succeeded, "without the leader, the agent succeeds when its own trainers are done"
    seen = {json.loads(p.read_text())["task"]: json.loads(json.loads(p.read_text())["tf_config"])
            for p in out.glob("*.json")}
    assert set(seen) == {"worker:1", "worker:2"}
    assert seen["worker:2"]["cluster"]["worker"] == list(cluster.worker), "the whole cluster, as given"


def test_new_round_restarts_with_the_new_cluster_without_using_the_budget(tmp_path):
    out, first, second = tmp_path / "out", layout(2), layout(3)
    spec = LaunchSpec(command=(sys.executable, FAKE, str(out), "--hang", "worker:0", "--first-attempt-only"), workers=3,
                      cluster=first, local_tasks=("worker:0",), max_restarts=0, log_dir=str(tmp_path / "logs"),
                      timeouts=Timeouts(grace=5))
    supervisor = Supervisor(spec, contain=False)

    def elastic_round() -> None:
        deadline = time.monotonic() + 30
        while not list(out.glob("worker-0-0.json")) and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.request_new_round(second, ("worker:0", "worker:2"))

    thread = threading.Thread(target=elastic_round)
    thread.start()
    # worker:0 hangs in the first attempt until the new round stops it; in the second it trains and succeeds.
    result = Supervisor.run(supervisor)
    thread.join()
    assert [a.cause for a in result.attempts] == [Cause.NEW_ROUND, Cause.SUCCEEDED], result.attempts
    config = json.loads(json.loads((out / "worker-2-1.json").read_text())["tf_config"])
    assert config["cluster"]["worker"] == list(second.worker)
