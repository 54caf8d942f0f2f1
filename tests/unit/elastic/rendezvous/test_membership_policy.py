"""The rendezvous' rules as a table: rounds, losses, failures, scale-up, timeouts, refusals. No sockets, no clock."""
from __future__ import annotations

import pytest

from tfdist.launch.elastic.rendezvous.membership import MembershipPolicy, Finish, Node, Phase, RendezvousSettings, StartRound, Stop
from tfdist.launch.outcome import Outcome

V = {"python": "3.12.3", "tfdist": "0.1.0", "tensorflow": "2.21.0"}


def settings(**overrides) -> RendezvousSettings:
    base = dict(job="j", min_nodes=2, max_nodes=3, node_timeout=2.0, rdzv_timeout=30.0, first_round_wait=3.0,
                max_restarts=1, fail_limit=2, cooldown=100.0, after_success=5.0, stop_timeout=20.0)
    return RendezvousSettings(**{**base, **overrides})


def join(policy: MembershipPolicy, node_id: int, *, rank: int | None = None, slots: int = 2, ready: bool = True,
         versions=V, job: str = "j"):
    node = Node(node_id, f"m{node_id}", f"198.18.0.{node_id}", slots, rank, dict(versions))
    refused = policy.on_join(node, job)
    if refused is None and ready:
        policy.on_ready(node_id, tuple(range(1000 * node_id, 1000 * node_id + slots)), None)
    return refused


def running(n: int = 3, **overrides) -> tuple[MembershipPolicy, StartRound]:
    policy = MembershipPolicy(settings(**overrides), now=0.0)
    for i in range(1, n + 1):
        join(policy, i)
    (start,) = policy.tick(1.0 if n == policy.s.max_nodes else 10.0)
    assert isinstance(start, StartRound)
    return policy, start


def stop_all(policy: MembershipPolicy, now: float) -> None:
    for node in list(policy.nodes.values()):
        if node.in_round:
            policy.on_ready(node.node_id, node.ports, None)


def test_a_full_house_starts_at_once_with_indices_by_node_rank():
    policy = MembershipPolicy(settings(), now=0.0)
    join(policy, 1, rank=2)
    join(policy, 2)  # no rank: after the ranked ones
    join(policy, 3, rank=0)
    (start,) = policy.tick(0.1)
    assert isinstance(start, StartRound) and start.world_size == 6
    assert [(a.node_id, a.node_rank, a.first_index) for a in start.assignments] == [(3, 0, 0), (1, 1, 2), (2, 2, 4)]
    assert start.workers[0] == "198.18.0.3:3000"  # worker 0, the chief, is on node rank 0


def test_min_nodes_wait_for_the_last_call_then_start():
    policy = MembershipPolicy(settings(), now=0.0)
    join(policy, 1)
    join(policy, 2)
    assert policy.tick(1.0) == []  # MIN reached at 1.0: wait up to 3 s for a third
    assert policy.tick(3.9) == []
    (start,) = policy.tick(4.0)
    assert isinstance(start, StartRound) and len(start.nodes) == 2


def test_too_few_machines_for_rdzv_timeout_fails_with_exit_3():
    policy = MembershipPolicy(settings(), now=0.0)
    join(policy, 1)
    assert policy.tick(29.0) == []
    (finish,) = policy.tick(30.0)
    assert isinstance(finish, Finish) and finish.status == 3 and "at least 2 machine(s), have 1" in finish.report


@pytest.mark.parametrize("node, job, message", [
    (dict(rank=0), "other", "job id 'other' is not this rendezvous' job"),
    (dict(rank=1), "j", "--node-rank 1 is already taken by m1"),
    (dict(rank=7), "j", "--node-rank 7 is outside 0..2"),
    (dict(versions={**V, "tensorflow": "2.20.0"}), "j", "version mismatch"),
])
def test_refusals(node, job, message):
    policy = MembershipPolicy(settings(), now=0.0)
    join(policy, 1, rank=1)
    refused = join(policy, 9, job=job, **node)
    assert refused is not None and message in refused[0] and refused[1] == 2
    assert 9 not in policy.nodes


def test_more_machines_than_max_are_refused():
    policy = MembershipPolicy(settings(), now=0.0)
    for i in (1, 2, 3):
        join(policy, i)
    refused = join(policy, 4)
    assert refused is not None and "maximum of 3 machines" in refused[0]


def test_a_lost_machine_stops_the_round_and_the_rest_restart_smaller():
    policy, start = running()
    policy.on_lost(3, "no keep-alive for 2s", now=20.0)
    (stop,) = policy.tick(20.0)
    assert isinstance(stop, Stop) and not stop.graceful and set(stop.node_ids) == {1, 2}
    assert "lost m3 (198.18.0.3)" in stop.reason
    stop_all(policy, 21.0)
    assert policy.tick(21.0) == []  # stopping ends; waiting starts
    (again,) = policy.tick(21.1)  # no last call after the first round
    assert isinstance(again, StartRound) and again.round == 1 and again.world_size == 4
    assert policy.restarts == 0  # a loss is not a failure


def test_below_min_after_a_loss_waits_then_fails_naming_the_lost_machine():
    policy, _ = running(min_nodes=3)
    policy.on_lost(2, "connection closed", now=20.0)
    policy.tick(20.0)
    stop_all(policy, 20.5)
    assert policy.tick(20.5) == []
    assert policy.tick(49.0) == []
    (finish,) = policy.tick(50.6)
    assert isinstance(finish, Finish) and finish.status == 3
    assert "lost machines: m2 (198.18.0.2)" in finish.report


def test_a_failure_is_blamed_restarts_and_repeated_failures_blacklist():
    policy, _ = running(max_restarts=5)
    for round_ in range(2):
        policy.on_exited(2, round_, Outcome.FAILED, 10, "worker:2 exited 1", now=20.0)
        (stop,) = policy.tick(20.0)
        assert isinstance(stop, Stop) and set(stop.node_ids) == {1, 2, 3}
        stop_all(policy, 21.0)
        policy.tick(21.0)
        actions = policy.tick(21.1)
        assert isinstance(actions[0], StartRound)
    assert policy.restarts == 2 and "m2 (198.18.0.2)" in policy.blacklist
    assert [n[1] for n in actions[0].nodes] == ["m1", "m3"]  # left out during its cool-down
    assert policy.tick(150.0) == []


def test_a_failure_beside_a_lost_machine_is_not_blamed():
    policy, _ = running()
    policy.on_exited(1, 0, Outcome.FAILED, 10, "collective failed", now=20.0)
    policy.on_lost(3, "no keep-alive", now=21.0)
    policy.tick(21.0)
    stop_all(policy, 22.0)
    policy.tick(22.0)
    assert policy.restarts == 0 and policy.failures == {}


def test_failures_past_the_budget_fail_the_job():
    policy, _ = running(max_restarts=0)
    policy.on_exited(1, 0, Outcome.FAILED, 10, "worker:0 exited 1", now=20.0)
    policy.tick(20.0)
    stop_all(policy, 21.0)
    (finish,) = policy.tick(21.0)
    assert isinstance(finish, Finish) and finish.status == 3 and "restart budget (0) spent" in finish.report


def test_a_joining_machine_scales_up_gracefully_once_the_round_trains():
    policy = MembershipPolicy(settings(), now=0.0)
    join(policy, 1)
    join(policy, 2)
    policy.tick(0.0)
    (start,) = policy.tick(3.0)
    join(policy, 3)
    assert policy.tick(4.0) == []  # the round is not training yet: no save to make
    policy.on_training(1, 0)
    policy.on_training(2, 0)
    (stop,) = policy.tick(5.0)
    assert isinstance(stop, Stop) and stop.graceful and "m3 (198.18.0.3) joined" in stop.reason
    stop_all(policy, 6.0)
    policy.tick(6.0)
    (bigger,) = policy.tick(6.1)
    assert isinstance(bigger, StartRound) and bigger.world_size == 6


def test_a_growth_from_256_to_1024_machines_stops_the_round_with_a_reason_that_fits_one_message():
    # The stop named every newcomer: 768 of them outgrew a message's text, and every member would have dropped
    # the rendezvous' stop as "not this protocol".
    from tfdist.launch.elastic.messages import protocol as M

    policy = MembershipPolicy(settings(min_nodes=256, max_nodes=1024, first_round_wait=0.0), now=0.0)
    for i in range(1, 257):
        join(policy, i, slots=1)
    (start,) = policy.tick(1.0)
    assert isinstance(start, StartRound)
    for i in range(1, 257):
        policy.on_training(i, start.round)
    for i in range(257, 1025):
        join(policy, i, slots=1)
    (stop,) = policy.tick(2.0)
    assert isinstance(stop, Stop) and stop.graceful
    assert "m257 (198.18.0.257)" in stop.reason and "and 760 more joined" in stop.reason, stop.reason
    assert M.checked(M.Stop(round=start.round, graceful=True, reason=stop.reason)).reason == stop.reason


def test_rank_zero_success_finishes_the_job():
    policy, _ = running()
    policy.on_exited(1, 0, Outcome.SUCCEEDED, 120, "", now=30.0)
    assert policy.phase is Phase.FINISHING and policy.tick(30.0) == []
    policy.on_exited(2, 0, Outcome.SUCCEEDED, 120, "", now=30.5)
    policy.on_exited(3, 0, Outcome.SUCCEEDED, 120, "", now=30.6)
    (finish,) = policy.tick(30.7)
    assert isinstance(finish, Finish) and finish.status == 0


def test_an_interrupt_saves_everywhere_then_ends_with_the_signal_status():
    policy, _ = running()
    policy.interrupt(15, now=10.0)
    (stop,) = policy.tick(10.0)
    assert stop.graceful
    stop_all(policy, 11.0)
    (finish,) = policy.tick(11.0)
    assert finish.status == 143


def _fail_round(policy: MembershipPolicy, now: float) -> list:
    """Node 2's tasks fail in the current round at ``now``; every machine confirms its stop; the tick after."""
    policy.on_exited(2, policy.round, Outcome.FAILED, 10, "worker:2 exited 1", now=now)
    policy.tick(now)
    stop_all(policy, now)
    return policy.tick(now + 0.01)


@pytest.mark.parametrize("backoff, first_delay, second_delay", [(0.0, 0.0, 0.0), (2.0, 2.0, 4.0), (20.0, 20.0, 30.0)])
def test_backoff_delays_each_next_round_doubling_as_on_one_machine(backoff, first_delay, second_delay):
    policy, _ = running(max_restarts=5, fail_limit=99, backoff=backoff)
    for failed_at, delay in ((20.0, first_delay), (100.0, second_delay)):
        assert _fail_round(policy, failed_at) == []
        if delay:
            assert policy.tick(failed_at + 0.01 + delay - 0.1) == []  # not before the back-off
        (start,) = policy.tick(failed_at + 0.02 + delay)
        assert isinstance(start, StartRound)


@pytest.mark.parametrize("window, second_failure_at, job_over", [
    (0.0, 50.0, True),  # no window: one restart, ever
    (60.0, 50.0, True),  # the first restart is still inside the window
    (60.0, 200.0, False),  # the first restart has left the window: it no longer counts
])
def test_restart_window_lets_old_restarts_expire_as_on_one_machine(window, second_failure_at, job_over):
    policy, _ = running(max_restarts=1, fail_limit=99, restart_window=window)
    _fail_round(policy, 20.0)
    assert isinstance(policy.tick(20.1)[0], StartRound)
    actions = _fail_round(policy, second_failure_at)
    if job_over:
        (finish,) = actions
        assert isinstance(finish, Finish) and finish.status == 3 and "restart budget (1" in finish.report
    else:
        assert actions == [] and isinstance(policy.tick(second_failure_at + 0.1)[0], StartRound)


def test_the_report_has_the_single_machine_shape():
    from tfdist.launch.outcome import Attempt, Cause, LaunchResult, render_report, render_success

    policy, _ = running()
    for node_id in (1, 2, 3):
        policy.on_exited(node_id, 0, Outcome.SUCCEEDED, 120, "", now=30.0)
    (finish,) = policy.tick(30.1)
    for node_id in (1, 2, 3):  # the agents leave once the job is over
        policy.on_lost(node_id, "its agent closed the connection", now=31.0)
    single = render_success(LaunchResult(run_id="j", log_dir="/x"))
    assert finish.report.splitlines()[0] == single == "tfdist: job j succeeded after 0 restart(s)"
    assert "succeeded: succeeded" not in finish.report and "lost" not in policy.report(0, "succeeded")

    policy, _ = running(max_restarts=0)
    policy.on_exited(2, 0, Outcome.FAILED, 10, "worker:2 exited 1", now=20.0)
    policy.tick(20.0)
    stop_all(policy, 21.0)
    (finish,) = policy.tick(21.0)
    single = render_report(LaunchResult(run_id="j", log_dir="/x", attempts=[Attempt(0, Cause.TASK_FAILED, 1.0)]))
    first, *rest = finish.report.splitlines()
    assert first.startswith("tfdist: job j did not succeed after 1 attempt(s)")
    assert single.splitlines()[0].startswith("tfdist: job j did not succeed after 1 attempt(s)")
    assert rest[0] == single.splitlines()[1] == "attempts:" and rest[1].startswith("  #0: ")
    assert finish.report.splitlines()[-1] == "root cause (attempt #0): m2 (198.18.0.2): worker:2 exited 1"
