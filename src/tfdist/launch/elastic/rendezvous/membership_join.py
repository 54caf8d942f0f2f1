"""Whether the rendezvous lets a machine in: the checks of a join against the job and its live members. Pure.

:meth:`MembershipPolicy.on_join <tfdist.launch.elastic.rendezvous.membership.MembershipPolicy.on_join>` asks
:func:`join_refusal` before it admits anyone. Besides the job's shape (its id, node ranks, MAX, versions, roles), a
machine's name is what the rendezvous remembers it by: reports, the left-out list, a lost machine's kept seat and the
machine believed to have written the newest backup all go by it. A name is a claim the joining machine makes about
itself, so a join that takes the name of a **live** member is refused, and never evicts it: a stranger holding the
secret cannot push an honest machine out or borrow its standing. The same holds for an address that a live member
uses, unless both machines have names of their own (``--node-name``: two agents on one machine). A machine whose
old connection is already lost rejoins under its name as before; one whose old connection the rendezvous has not yet
dropped (it drops a silent member within ``--node-timeout``) is told :data:`NAME_IN_USE`, which its agent tries
again for a while (:func:`join_retry`, here with the fact it depends on).
"""
from __future__ import annotations

from typing import Iterable

from tfdist.launch.elastic.rendezvous.membership_types import Node, RendezvousSettings
from tfdist.launch.elastic.rendezvous.report import some_of
from tfdist.status import ExitStatus

# The words of the refusal for a name or address a live member holds; the agent recognises them (it retries such a
# refusal while its own old connection may still be dying).
NAME_IN_USE = "is in use by a live member"


def join_refusal(node: Node, job: str, settings: RendezvousSettings,
                 live: Iterable[Node]) -> tuple[str, int] | None:
    """Why ``node`` (asking for ``job``) may not join a rendezvous whose connected members are ``live``: (reason,
    the exit status its agent gets); None: let it in."""
    live = list(live)
    usage = int(ExitStatus.USAGE)
    if job != settings.job:
        return f"job id {job[:64]!r} is not this rendezvous' job (pass the same --rdzv-id on every machine)", usage
    if node.requested_rank is not None and not 0 <= node.requested_rank < settings.max_nodes:
        return (f"--node-rank {node.requested_rank} is outside 0..{settings.max_nodes - 1} for --nnodes "
                f"max {settings.max_nodes}", usage)
    taken = _identity_taken(node, live)  # before the rank and MAX: a machine's own old connection holds both
    if taken:
        return taken, usage
    twin = next((n for n in live if node.requested_rank is not None and n.requested_rank == node.requested_rank), None)
    if twin is not None:
        return (f"--node-rank {node.requested_rank} is already taken by {twin.label} (give every machine its own "
                "--node-rank)", usage)
    if len(live) >= settings.max_nodes:
        return f"the job already has its maximum of {settings.max_nodes} machines ({some_of([n.label for n in live])})", usage
    first = next(iter(live), None)
    if first is not None and first.versions and node.versions and first.versions != node.versions:
        return ("version mismatch: " + "; ".join(f"{n.label}: {_versions(n.versions)}" for n in (first, node))
                + " (install the same versions on every machine)", usage)
    if first is not None and first.layout != node.layout:
        return (f"roles differ: {first.label} has {_roles(first.layout)}, {node.label} has {_roles(node.layout)} "
                "(give every machine the same --chief/--ps/--evaluator)", usage)
    return None


def _identity_taken(node: Node, live: list[Node]) -> str:
    """Why ``node``'s name or address is a live member's (``""``: neither is). An address alone is shared only by
    machines that both have names of their own."""
    twin = next((n for n in live if n.name == node.name), None)
    what = f"the name {node.name!r}"
    if twin is None:
        twin = next((n for n in live if n.address == node.address and
                     (n.name == n.address or node.name == node.address)), None)
        what = f"the address {node.address}"
    if twin is None:
        return ""
    return (f"{what} {NAME_IN_USE} ({twin.label}): give each machine its own --node-name (one that lost its "
            "connection is let in once the old one is dropped, within --node-timeout)")


def _versions(versions: dict[str, str]) -> str:
    return ", ".join(f"{key} {value}" for key, value in sorted(versions.items()))


def _roles(layout: str) -> str:
    return layout.replace("ps=", "ps ") or "workers only"


def join_retry(reason: str, refused_since: float, now: float, node_timeout: float, deadline: float) -> float | None:
    """For the refused agent: seconds to wait before it joins again, or None to exit with the refusal. Pure.

    Only :data:`NAME_IN_USE` is tried again. The live holder of the name is most often this machine's own old
    connection (the agent gave up on a link the rendezvous still holds, or it restarted after a crash), which the
    rendezvous drops within ``node_timeout`` of its last keep-alive; still refused twice that long after the first
    refusal (never past ``deadline``, --rdzv-timeout), the holder is another live machine, which will not go away,
    and waiting for --rdzv-timeout would only hide a duplicate --node-name: the agent exits 2 with the reason."""
    if NAME_IN_USE not in reason or now - refused_since >= 2 * node_timeout + 1.0 or now >= deadline:
        return None
    return max(0.05, min(node_timeout / 4, 1.0, deadline - now))
