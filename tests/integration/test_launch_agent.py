"""The supervisor running its share of a bigger job: the cluster comes from outside, only some tasks are local
(stand-in tasks, no TensorFlow)."""
from __future__ import annotations

import json
import sys

from tests.conftest import REPO_ROOT
from tfdist.launch.local.ports import free_ports
from tfdist.launch.spec import LaunchSpec
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
