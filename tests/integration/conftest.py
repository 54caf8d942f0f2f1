"""Integration-test teardown: a test that fails (or times out) in the middle of a real job leaves no launcher behind."""
from __future__ import annotations

import glob
import shutil
import warnings
from typing import Iterator

import pytest

from tests.integration.faultlib import stop_left_over_jobs


AGENT_FOLDERS = "/tmp/tfdist-agent-*"  # an agent's temporary run folder (no --log-dir): agent/agent.py


@pytest.fixture(autouse=True)
def no_job_left_running() -> Iterator[None]:
    agent_folders_before = set(glob.glob(AGENT_FOLDERS))
    yield
    for launch_args in stop_left_over_jobs():
        warnings.warn(f"a job was still running when its test ended; stopped it: tfdist launch {' '.join(launch_args)}")
    # An agent keeps its temporary run folder after a failed run (its logs are the evidence) and cannot remove it
    # when it is killed: the tests that fail a job or kill an agent on purpose (network-namespace machines share
    # this /tmp) would leave them on the machine. A test that checks that an agent removes its folder checks it
    # before this runs.
    for folder in set(glob.glob(AGENT_FOLDERS)) - agent_folders_before:
        shutil.rmtree(folder, ignore_errors=True)
