"""One round's machines and workers as every member of the round gets them: two texts, each checked whole by one
compiled full-match, built and encoded once per round and shared by every member's ``round`` message.

Why texts and not a JSON list per machine: a round names all its machines, so N members each reading N machines is
N^2 work, and the work per machine must be tiny. As five JSON values per machine, checked one field at a time, a
round of 1,024 machines cost each member about 3 ms (the JSON parser building 6,000 values, the nesting scan over
thousands of brackets, a dozen checks per machine), 3 CPU-seconds of the fleet's per round, and the rendezvous
encoded the whole list again for each member (0.4 ms each). Now a member's check is two regular-expression
full-matches at C speed and a split, and the rendezvous writes the list's JSON once per round (:attr:`json`).

Checked whole on receipt, read into lists only when asked (:attr:`RoundMachines.nodes`): an agent reads the machines
only to place a job's roles (``round_roles.py``); without roles it needs their number and the workers alone. Making
1,024 machines' lists (5,000 strings and numbers, 2,000 lists) was half a member's decode and, with a fleet's
rounds alive, most of its garbage collector's work (at N = 1,024 in ``bench/rdzv_scale.py`` the agents' decoding
took 1.5-4.7 CPU-seconds of the burst, 1.1 s with the collector off). Every rule is checked on receipt all the same:
the full-match, and the two rules it does not spell out on the lines :data:`_CHECKED` finds.

The wire form, inside a ``round`` message: ``"machines": {"nodes": NODES, "workers": WORKERS}``.

- NODES: one line per machine, ``\\n`` between lines: ``RANK SLOTS ROLES ADDRESS NAME``; ROLES is ``-`` for none,
  else the distinct roles the machine is pinned to, joined by ``,``; ADDRESS holds no white space (a host name or an
  IP address, checked at the join); NAME is the rest of the line (names reach the rendezvous' round through
  ``printable``, which leaves no line break in them).
- WORKERS: the workers' addresses (``host:port``), one space between two.

The limits are the ones the per-field checks had (a rank up to 15 digits, 1-:data:`MAX_SLOTS` slots, texts of 256
and 300 characters, :data:`MAX_ITEMS` machines), except the workers: up to :data:`MAX_TASKS` (a job's tasks); the
list check allowed :data:`MAX_ITEMS` (4,096), fewer than a job of 1,024 machines with 8 GPUs each has.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Sequence

from tfdist.cluster.limits import MAX_TASKS
from tfdist.cluster.placement import role_list
from tfdist.cluster.roles import ALL_ROLES
from tfdist.launch.elastic.messages.fields import MAX_ITEMS, MAX_SLOTS, ProtocolError

_ROLE = "(?:" + "|".join(ALL_ROLES) + ")"
_NODE = (rf"(?:0|[1-9][0-9]{{0,14}}) [1-9][0-9]{{0,{len(str(MAX_SLOTS)) - 1}}} (?:-|{_ROLE}(?:,{_ROLE}){{0,{len(ALL_ROLES) - 1}}}) "
         r"\S{1,256} [^\n]{0,256}")
# Every quantifier stops at a separator it cannot match (space, line break), so a well-formed text is read in one
# pass, and a bad one costs at most one line's length of retries per line (Python 3.10 has no possessive forms).
# How many lines and words is counted before the match (a counted repeat of the group was twice as slow).
NODES = re.compile(rf"(?:{_NODE}(?:\n{_NODE})*)?")
# The lines of a text that matched NODES that a Python check must read (slots, roles): slots with as many digits as
# MAX_SLOTS (the pattern bounds the digits; the number, :func:`_checked_lines`), roles of more than one (distinct:
# role_list's rule). A usual fleet has none (one worker or a few, no roles or one), so this is one C scan. It is
# searched in the text after a line break (each line starts after one): a literal first character lets the engine
# skip to the line starts (0.07 ms for 1,024 machines; 0.15 ms with ``^`` and re.M, tried at every character).
_CHECKED = re.compile(rf"\n[0-9]+ (?=[0-9]{{{len(str(MAX_SLOTS))},}} |[0-9]+ [^ \n]*,)([0-9]+) ([^ \n]+) ")
WORKERS = re.compile(r"(?:\S{1,300}(?: \S{1,300})*)?")

# One machine as the rendezvous sends it and the agent reads it: [rank, name, address, slots, roles].
Node = list[Any]


@dataclass(frozen=True)
class RoundMachines:
    """The machines of one round (``[rank, name, address, slots, roles]`` each) and its workers' addresses.

    Built once per round by the rendezvous (:meth:`of`) and shared by every member's message; read from the wire
    by :meth:`check`. ``nodes`` and ``workers`` are lists, as the agent has always read them; ``nodes`` is read from
    the checked text at its first use (``count``: how many, without reading them). Two are equal when their texts
    are (the texts are all they hold)."""

    workers: list[str] = field(compare=False)
    wire: dict[str, str]  # {"nodes": NODES, "workers": WORKERS}
    count: int = field(compare=False)  # the machines

    @classmethod
    def of(cls, nodes: Iterable[Sequence[Any]], workers: Iterable[str]) -> "RoundMachines":
        """The round's machines as a rendezvous sends them, checked as a receiver will check them: a machine the
        wire form cannot carry (a name with a line break) fails here, where the round is made (ProtocolError)."""
        listed = [[int(n[0]), str(n[1]), str(n[2]), int(n[3]), [str(r) for r in n[4]]] for n in nodes]
        addresses = list(workers)
        wire = {"nodes": "\n".join(f"{rank} {slots} {','.join(roles) or '-'} {address} {name}"
                                   for rank, name, address, slots, roles in listed),
                "workers": " ".join(addresses)}
        made = cls.check(wire)
        if made.nodes != listed or made.workers != addresses:  # e.g. an address with a space, read as two fields
            raise ProtocolError("machines: a machine or worker that a round's text cannot carry")
        return made

    @classmethod
    def check(cls, value: Any, what: str = "machines") -> "RoundMachines":
        """The wire form -> the machines; ProtocolError naming the part that is not a round's machines."""
        if not isinstance(value, dict) or set(value) != {"nodes", "workers"}:
            raise ProtocolError(f"{what}: expected an object of nodes and workers")
        nodes, workers = value["nodes"], value["workers"]
        if not isinstance(nodes, str) or nodes.count("\n") >= MAX_ITEMS or not NODES.fullmatch(nodes):
            raise ProtocolError(f"{what}.nodes: not a round's machines (one 'rank slots roles address name' a line, "
                                f"at most {MAX_ITEMS})")
        if not isinstance(workers, str) or workers.count(" ") >= MAX_TASKS or not WORKERS.fullmatch(workers):
            raise ProtocolError(f"{what}.workers: not a round's workers (addresses, one space between two, "
                                f"at most {MAX_TASKS})")
        _checked_lines(nodes)
        return cls(workers.split(" ") if workers else [], {"nodes": nodes, "workers": workers},
                   nodes.count("\n") + 1 if nodes else 0)

    @cached_property
    def nodes(self) -> list[Node]:
        """The machines, read from the text (checked whole by :meth:`check`) at the first use."""
        return _nodes(self.wire["nodes"])

    @cached_property
    def json(self) -> bytes:
        """The wire form as JSON, written once: every member's ``round`` message carries these same bytes."""
        return json.dumps(self.wire, separators=(",", ":")).encode()


def _checked_lines(text: str) -> None:
    """The rules of a text that matched :data:`NODES` that the pattern does not spell out, on the lines
    :data:`_CHECKED` finds: at most MAX_SLOTS slots, distinct known roles (``role_list``). Raises ProtocolError."""
    for slots, roles in _CHECKED.findall("\n" + text):
        if int(slots) > MAX_SLOTS:  # the pattern bounds the digits; this, the number
            raise ProtocolError(f"machines.nodes: a machine with more than {MAX_SLOTS} slots")
        try:
            role_list(roles.split(","))
        except ValueError:
            raise ProtocolError("machines.nodes: not the job's roles") from None


def _nodes(text: str) -> list[Node]:
    """The machines of a text that passed :meth:`RoundMachines.check` (so no check here)."""
    if not text:
        return []
    roles_of: dict[str, tuple[str, ...]] = {"-": ()}
    out = []
    for line in text.split("\n"):  # no Python function call per machine: a plain loop over C-made parts
        rank, slots, roles, address, name = line.split(" ", 4)
        pinned = roles_of.get(roles)
        if pinned is None:
            pinned = roles_of[roles] = tuple(roles.split(","))
        out.append([int(rank), name, address, int(slots), list(pinned)])
    return out
