"""An agent whose name a live member holds (issue 34): the real agent, client and rendezvous server on loopback. It
tries again while the holder may be its own dying connection and joins once that is dropped; a holder that stays is
another machine: the agent exits 2 with the reason, and the live member is never evicted."""
from __future__ import annotations

from tests.unit.elastic.agent.test_agent_in_process import Machine, _server, machines, wait_until
from tests.unit.elastic.tcp.rdzv_peer import keeping_alive, member
from tfdist.launch.elastic.rendezvous.membership_join import NAME_IN_USE
from tfdist.status import ExitStatus


def test_a_name_a_live_machine_keeps_is_refused_after_a_short_retry_and_the_machine_stays(tmp_path):
    lines: list[str] = []
    with _server(min_nodes=2) as server:
        honest = member(server, "alpha")
        machine = Machine(tmp_path, server.address[1], name="alpha", node_timeout=0.3, say=lines.append).start()
        with machines(machine), keeping_alive(honest):
            assert machine.wait() == int(ExitStatus.USAGE)
            assert [n.name for n in dict(server.policy.nodes).values()] == ["alpha"]  # the honest one, kept
            assert server.policy.lost == []
    assert any("refused for now" in line and "trying again" in line for line in lines), lines
    final = [line for line in lines if "refused by the rendezvous:" in line]
    assert len(final) == 1 and NAME_IN_USE in final[0] and "--node-name" in final[0], lines
    assert machine.groups == []


def test_a_machine_whose_old_connection_goes_away_meanwhile_joins(tmp_path):
    lines: list[str] = []
    with _server(min_nodes=1) as server:
        old = member(server, "alpha")
        machine = Machine(tmp_path, server.address[1], name="alpha", node_timeout=2.0, say=lines.append).start()
        with machines(machine):
            wait_until(lambda: any("refused for now" in line for line in lines), what="the first refusal")
            old.close()  # the old connection is gone: the server drops it
            group = machine.round_group()
            assert group.calls == ["start"]
            assert [n.name for n in dict(server.policy.nodes).values()] == ["alpha"]
    assert not any("refused by the rendezvous:" in line for line in lines), lines
