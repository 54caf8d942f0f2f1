"""What must stop a multi-machine job before anything starts: one clear message, exit 2, no task anywhere.

Version mismatch, an unreachable host and a script missing on one host are found by the host-file preflight (over
ssh); a wrong job id and a duplicate node rank are refused by the rendezvous. Machines differ through private
mounts: machine 2's sshd sees another tfdist version, or no examples folder."""
from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT
from tests.integration.multilib import DIGITS, FAST, SCRIPT_ARGS, Agent, job_secret_file, rendezvous_args
from tests.integration.netns import Machines, why_no_namespaces, why_no_sshd

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(why_no_namespaces() is not None, reason=str(why_no_namespaces()))]
needs_ssh = pytest.mark.skipif(why_no_sshd() is not None, reason=str(why_no_sshd()))


def _driver(machines: Machines, tmp_path, hosts: str) -> Agent:
    return Agent(machines, 1, ["--hosts", hosts, "-n", "1", *FAST, "--", DIGITS, *SCRIPT_ARGS, "--model-dir",
                               str(tmp_path / "model")], tmp_path).start()


def _nothing_started(machines: Machines, agent: Agent) -> None:
    assert "round 0" not in agent.err and "worker:" not in agent.out
    assert [p for p in machines.pids() if p not in machines.sshd_pids()] == []


def _one_error_line(text: str) -> str:
    lines = [line for line in text.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@needs_ssh
def test_version_mismatch_lists_every_hosts_versions(tmp_path):
    other = tmp_path / "init.py"
    original = (REPO_ROOT / "src" / "tfdist" / "__init__.py").read_text()
    other.write_text(re.sub(r'__version__ = "[^"]+"', '__version__ = "0.0.9"', original))
    mounts = {2: {str(REPO_ROOT / "src" / "tfdist" / "__init__.py"): str(other)}}
    with Machines(2, ssh=True, sshd_mounts=mounts) as machines:
        driver = _driver(machines, tmp_path, "198.18.0.1,198.18.0.2")
        assert driver.wait(120) == 2
        line = _one_error_line(driver.err)
        assert "versions differ between hosts" in line
        assert re.search(r"198\.18\.0\.1: python [\d.]+, tensorflow \S+, tfdist 0\.1\.0", line)
        assert "198.18.0.2: python" in line and "tfdist 0.0.9" in line
        _nothing_started(machines, driver)
    assert machines.existing() == []


@needs_ssh
def test_an_unreachable_host_is_named(tmp_path):
    with Machines(2, ssh=True) as machines:
        driver = _driver(machines, tmp_path, "198.18.0.1,198.18.0.2,198.18.0.9")
        assert driver.wait(120) == 2
        line = _one_error_line(driver.err)
        assert "198.18.0.9: unreachable over ssh" in line and "198.18.0.2" not in line
        _nothing_started(machines, driver)
    assert machines.existing() == []


@needs_ssh
def test_a_script_missing_on_one_host_is_named(tmp_path):
    mounts = {2: {str(REPO_ROOT / "src" / "tfdist" / "examples"): str(tmp_path / "empty")}}
    with Machines(2, ssh=True, sshd_mounts=mounts) as machines:
        driver = _driver(machines, tmp_path, "198.18.0.1,198.18.0.2")
        assert driver.wait(120) == 2
        line = _one_error_line(driver.err)
        assert f"{DIGITS} is missing" in line and line.rstrip().endswith("on 198.18.0.2 (copy the script to the "
                                                                         "same path on every host)")
        _nothing_started(machines, driver)
    assert machines.existing() == []


@needs_ssh
def test_hosts_that_cannot_reach_each_other_are_named(tmp_path):
    with Machines(3, ssh=True) as machines:
        machines.blackhole(3, 2)
        driver = _driver(machines, tmp_path, "198.18.0.1,198.18.0.2,198.18.0.3")
        assert driver.wait(120) == 2
        line = _one_error_line(driver.err)
        assert "hosts cannot reach each other" in line
        assert re.search(r"from 198\.18\.0\.3 to 198\.18\.0\.2:\d+", line)
        assert not re.search(r"from 198\.18\.0\.1 to", line)  # machine 1 reaches both
        _nothing_started(machines, driver)
    assert machines.existing() == []


@pytest.mark.parametrize("second, message", [
    (["--rdzv-id", "another-job"], "job id 'another-job' is not this rendezvous' job"),
    (["--node-rank", "0"], "--node-rank 0 is already taken by 198.18.0.1"),
    # a live machine's name (its address, no --node-name of its own): refused after a short retry, never evicted
    (["--node-name", "198.18.0.1"], "the name '198.18.0.1' is in use by a live member (198.18.0.1)"),
    (["--other-secret"], "198.18.0.1:29400 did not prove this job's secret"),
])
def test_the_rendezvous_refuses_a_wrong_job_or_a_taken_rank(tmp_path, second, message):
    with Machines(2) as machines:
        model = str(tmp_path / "model")
        first = Agent(machines, 1, rendezvous_args(machines, "2", 1, model, "--node-rank", "0", "--rdzv-timeout",
                                                   "60"), tmp_path).start()
        first.wait_for(r"198\.18\.0\.1 joined")
        args = rendezvous_args(machines, "2", 1, model, *second)
        if "--rdzv-id" in second:  # the later flag wins: put the wrong id last
            args = rendezvous_args(machines, "2", 1, model, job="another-job")
        if "--other-secret" in second:  # a machine of another job (another secret) on the same endpoint
            other = tmp_path / "other"
            other.mkdir()
            args = rendezvous_args(machines, "2", 1, model, secret_file=job_secret_file(other))
        late = Agent(machines, 2, args, tmp_path).start()
        assert late.wait(60) == 2
        assert message in late.err and "Traceback" not in late.err
        assert "'digits'" not in late.err  # the real job id is never told to a machine that is refused
        assert "round 0" not in first.err
        first.proc.terminate()
        assert first.wait(30) == 143
        assert machines.pids() == []
    assert machines.existing() == []
