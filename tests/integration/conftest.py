"""Integration-test teardown: a test that fails (or times out) in the middle of a real job leaves no launcher behind."""
from __future__ import annotations

import warnings
from typing import Iterator

import pytest

from tests.integration.faultlib import stop_left_over_jobs


@pytest.fixture(autouse=True)
def no_job_left_running() -> Iterator[None]:
    yield
    for launch_args in stop_left_over_jobs():
        warnings.warn(f"a job was still running when its test ended; stopped it: tfdist launch {' '.join(launch_args)}")
