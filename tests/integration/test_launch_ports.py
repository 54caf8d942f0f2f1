"""A port taken between selection and the task's bind: the supervisor picks fresh ports and retries."""
from __future__ import annotations

import socket

import tfdist.launch.local.supervisor as supervisor_module
from tests.conftest import REPO_ROOT
from tfdist.launch.outcome import Cause
from tfdist.launch.spec import LaunchSpec
from tfdist.launch.local.supervisor import Supervisor
from tfdist.launch.local.ports import free_ports

FAKE = str(REPO_ROOT / "tests" / "bin" / "fake_task.py")


def test_stolen_port_is_retried_with_fresh_ports(tmp_path, monkeypatch):
    import sys

    thief = socket.socket()
    thief.bind(("127.0.0.1", 0))
    thief.listen()
    stolen = thief.getsockname()[1]
    calls = []

    def ports_with_one_stolen(count, host="127.0.0.1"):
        calls.append(count)
        ports = free_ports(count, host)
        if len(calls) == 1:
            ports[-1] = stolen  # handed out, then taken by another program before the task binds it
        return ports

    monkeypatch.setattr(supervisor_module, "free_ports", ports_with_one_stolen)
    spec = LaunchSpec(command=(sys.executable, FAKE, str(tmp_path / "out"), "--bind",
                               "--first-attempt-waits"), workers=2,
                      log_dir=str(tmp_path / "logs"), max_restarts=0, backoff=0)
    try:
        result = Supervisor(spec).run()
    finally:
        thief.close()
    assert [a.cause for a in result.attempts] == [Cause.PORT_CONFLICT, Cause.SUCCEEDED]
    assert result.attempts[0].failure is not None and result.attempts[0].failure.task == "worker:1"
    assert len(calls) == 2, "fresh ports for the retry"
    assert result.succeeded, "a port race must not use up the restart budget (max_restarts=0)"
