"""StopRequests (launch/local/stops.py) as the multi-machine agent and the host-file driver use them: the first
signal is handed to the rendezvous server they host from a thread (never from the handler), a second signal means
"kill now", a second Ctrl-C abandons them. Signals are delivered by calling the handler, as the kernel would."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tfdist.launch.local.stops import StopRequests
from tfdist.launch.outcome import Cause


def _until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)
    return predicate()


@pytest.mark.parametrize("first, cause", [(signal.SIGTERM, Cause.PREEMPTED), (signal.SIGINT, Cause.INTERRUPTED),
                                          (signal.SIGHUP, Cause.PREEMPTED)])
def test_the_first_signal_is_forwarded_once_from_a_thread(first, cause):
    stops = StopRequests()
    told: list[tuple[int, str]] = []
    stops.forward(lambda signum: told.append((signum, threading.current_thread().name)))
    try:
        time.sleep(0.1)
        assert told == []  # nothing asked yet
        stops._on_signal(first, None)
        assert _until(lambda: told)
        stops._on_signal(signal.SIGTERM, None)
        time.sleep(0.2)
        assert told == [(first, "stop-forward")]  # once, the first signal, not in the handler's (main) thread
        assert stops.cause is cause and stops.kill_now and stops.second_signal == signal.SIGTERM
    finally:
        stops.restore()


def test_restore_ends_the_forwarding():
    stops = StopRequests()
    told: list[int] = []
    stops.forward(told.append)
    stops.restore()
    time.sleep(0.1)
    stops._on_signal(signal.SIGTERM, None)
    time.sleep(0.3)
    assert told == []


@pytest.mark.parametrize("signals, abandons", [
    ((), False),
    ((signal.SIGTERM,), False),
    ((signal.SIGINT,), False),  # the first Ctrl-C asks for a graceful stop
    ((signal.SIGTERM, signal.SIGINT), True),
    ((signal.SIGINT, signal.SIGINT), True),
    ((signal.SIGINT, signal.SIGTERM), False),  # kill now, but not abandoned: the caller cuts its waits short
    ((signal.SIGTERM, signal.SIGTERM, signal.SIGINT), False),  # the second signal decides; later ones are ignored
])
def test_a_second_ctrl_c_abandons(signals, abandons):
    stops = StopRequests()
    for signum in signals:
        stops._on_signal(signum, None)
    if abandons:
        with pytest.raises(KeyboardInterrupt):
            stops.abandon_on_second_ctrl_c()
    else:
        stops.abandon_on_second_ctrl_c()
    assert stops.kill_now is (len(signals) > 1)


def test_installed_handlers_set_flags_and_are_restored():
    stops = StopRequests()
    before = signal.getsignal(signal.SIGHUP)
    stops.install()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        assert _until(lambda: stops.requested)
        assert stops.signal == signal.SIGHUP and stops.cause is Cause.PREEMPTED
    finally:
        stops.restore()
    assert signal.getsignal(signal.SIGHUP) is before


def test_install_off_the_main_thread_is_a_no_op():
    stops = StopRequests()
    errors: list[BaseException] = []

    def install() -> None:
        try:
            stops.install()
        except BaseException as error:  # noqa: BLE001 - the test reports it
            errors.append(error)

    thread = threading.Thread(target=install)
    thread.start()
    thread.join()
    assert errors == [] and not stops._previous
