"""A lost machine's replacement gets the survivors' in-memory snapshot over the rendezvous: real TensorFlow on
network-namespace machines that share no /dev/shm (each machine's is its own folder), --nnodes 3 with one worker
each. Without the copy the replacement would have no snapshot and every replica would resume from the durable
checkpoint (here: none yet, so from scratch)."""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.integration.multilib import Agent, all_output, rendezvous_args, task_values, wait_for_round_at_step
from tests.integration.netns import Machines, why_no_namespaces

pytestmark = [pytest.mark.slow, pytest.mark.tf,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]

EPOCHS, STEPS = 2, 30
# No --save-every: the durable backup is written at epoch ends only, so before step 30 there is none and a resume
# from a later step can only come from a snapshot.
SCRIPT = ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS), "--no-tensorboard", "--step-delay", "0.05"]
SNAPSHOT = re.compile(r"snap-(\d{12})\.tfsnap")


def snapshot_steps(shm: Path) -> list[int]:
    """The committed snapshot steps in a machine's own /dev/shm (any tfdist folder in it)."""
    return sorted(int(m.group(1)) for path in shm.glob("tfdist-*/*") if (m := SNAPSHOT.fullmatch(path.name)))


def partials(shm: Path) -> list[Path]:
    return list(shm.glob("tfdist-*/.partial-*"))


def settled(shms: list[Path], timeout: float = 60) -> list[int]:
    """The survivors' snapshot steps once no write is in flight and two looks a second apart agree."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        now = [snapshot_steps(s) for s in shms]
        if now == last and not any(partials(s) for s in shms):
            return [max(steps, default=-1) for steps in now]
        last = now
        time.sleep(1.0)
    raise AssertionError(f"the survivors' snapshots kept changing: {last}")


def test_a_lost_machines_replacement_resumes_from_the_survivors_snapshot_with_no_step_lost(tmp_path):
    model = str(tmp_path / "model")
    shm = {i: tmp_path / f"shm{i}" for i in (1, 2, 3)}

    def agent(i: int, own_shm: Path) -> Agent:
        args = rendezvous_args(machines, "3", 1, model, "--log-dir", str(tmp_path / f"logs{i}-{own_shm.name}"),
                               "--tee", "--node-rank", str(i - 1), "--rdzv-timeout", "180",
                               "--env", "TFDIST_SNAPSHOT_EVERY=1", script=SCRIPT)
        return Agent(machines, i, args, tmp_path, private_dirs={"/dev/shm": str(own_shm)}).start()

    with Machines(3) as machines:
        agents = [agent(i, shm[i]) for i in (1, 2, 3)]
        # The newest round of 3, not round 0: under load a machine can miss a keep-alive before the fault, and then
        # the job re-forms; only what is printed after the fault counts below.
        wait_for_round_at_step(agents[0], tmp_path / "logs1-shm1", 3, 12, agents)
        marks = [a.mark() for a in agents[:2]]
        os.kill(agents[2].proc.pid, signal.SIGKILL)  # machine 3 is lost with its /dev/shm
        agents[0].wait_for(r"lost node \d+", after=marks[0][1])  # the rendezvous (machine 1) stops the round
        newest = settled([shm[1], shm[2]])
        survivors_step = max(newest)
        assert 12 <= survivors_step < STEPS, newest
        replacement = agent(3, tmp_path / "shm3-new")  # a fresh machine: nothing in its /dev/shm
        agents = [agents[0], agents[1], replacement]
        codes = [a.wait() for a in agents]
        text = agents[0].since(marks[0]) + agents[1].since(marks[1]) + all_output([replacement])
        assert codes == [0, 0, 0], all_output(agents)[-4000:]
        copied = re.search(r"copied the snapshot of step (\d+) from 198\.18\.0\.[12] \(\d+ bytes, SHA-256 and CRC "
                           r"checked\)", replacement.err)
        assert copied and int(copied.group(1)) == survivors_step, replacement.err[-3000:]
        resumed = re.findall(r"tfdist: resume: from (snapshot|checkpoint) at step (\d+)", text)
        # every replica of the next round resumed from the survivors' newest snapshot: 0 steps lost after it
        assert resumed == [("snapshot", str(survivors_step))] * 3, resumed
        assert re.search(rf"resumed_from_step={survivors_step} world_size=3", text)
        checksums = task_values(text, "weights_checksum")
        assert len(checksums) == 3 and len(set(checksums.values())) == 1
        assert set(task_values(text, "train_steps").values()) == {str(EPOCHS * STEPS)}
    assert machines.existing() == []
