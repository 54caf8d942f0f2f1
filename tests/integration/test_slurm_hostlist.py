"""tfdist's host-list expansion against Slurm's own (`scontrol show hostnames`, which needs no daemon)."""
from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest

from tfdist.cluster.hostlist import expand_hostlist

pytestmark = pytest.mark.slurm

SCONTROL = shutil.which("scontrol") or ("/usr/bin/scontrol" if os.path.exists("/usr/bin/scontrol") else None)


def _random_lists(count: int) -> list[str]:
    rng = random.Random(20261130)
    lists = []
    for _ in range(count):
        entries = []
        for _ in range(rng.randint(1, 3)):
            prefix = rng.choice(["node", "gpu-a", "n", "c1-r", "x"])
            ranges = []
            for _ in range(rng.randint(1, 3)):
                width = rng.choice([1, 2, 3])
                low = rng.randint(0, 20)
                high = low + rng.randint(0, 12)
                low_text = str(low).zfill(width)
                ranges.append(low_text if rng.random() < 0.3 else f"{low_text}-{high}")
            entries.append(f"{prefix}[{','.join(ranges)}]")
        lists.append(",".join(entries))
    return lists


@pytest.mark.skipif(SCONTROL is None, reason="scontrol not installed (apt-get install slurm-client)")
def test_expansion_matches_scontrol(tmp_path):
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost CPUs=1\nPartitionName=d Nodes=ALL\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    cases = ["node[9-10,12],gpu-a[01-03]", "r[1-2]n[01-02],x[098-100],y[7,09]", "n[9-011]", "n[1-2]-ib[0-1]",
             *_random_lists(30)]
    for text in cases:
        result = subprocess.run([SCONTROL, "show", "hostnames", text], env=env, capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 0, (text, result.stderr)
        assert expand_hostlist(text) == result.stdout.split(), text
