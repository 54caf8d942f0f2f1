"""Slurm host lists and task counts, expanded the way Slurm itself expands them.

Slurm writes node sets compactly: ``node[9-10,12],gpu-a[01-03]`` is ``node9 node10 node12 gpu-a01 gpu-a02
gpu-a03``, in that order (``scontrol show hostnames`` prints the same). Order matters: Slurm places task ranks on
nodes in this order, so sorting the names as text (as TensorFlow's ``SlurmClusterResolver`` does) puts ``node10``
before ``node9`` and crosses ranks and addresses.

Rules, checked against ``scontrol show hostnames`` of Slurm 22.05:

- top-level commas separate entries; commas inside brackets separate ranges;
- a range ``lo-hi`` keeps the width of ``lo`` (``[08-10]`` gives ``08 09 10``; ``[9-011]`` gives ``9 10 11``);
- several bracket groups in one entry multiply out, the leftmost varying slowest (``r[1-2]n[1-2]`` gives
  ``r1n1 r1n2 r2n1 r2n2``);
- order and duplicates are kept as written.
"""
from __future__ import annotations

import re
from itertools import product

from tfdist.errors import UsageError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
# A node list this long is a typo (a range like [1-99999999]), not a cluster.
_MAX_HOSTS = 1_000_000


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are outside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise UsageError(f"nested brackets in Slurm host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"unbalanced ']' in Slurm host list {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise UsageError(f"unclosed '[' in Slurm host list {text!r}")
    parts.append("".join(current))
    return parts


def _expand_ranges(body: str, whole: str) -> list[str]:
    """``9-10,12`` -> ``['9', '10', '12']``, keeping zero padding."""
    values: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        match = _RANGE.match(piece)
        if not match:
            raise UsageError(f"bad range {piece!r} in Slurm host list {whole!r}", hint="ranges look like 01-04")
        low_text, high_text = match.group(1), match.group(2)
        low = int(low_text)
        high = low if high_text is None else int(high_text)
        if high < low:
            raise UsageError(f"range {piece!r} runs backwards in Slurm host list {whole!r}")
        if high - low >= _MAX_HOSTS:
            raise UsageError(f"range {piece!r} in Slurm host list {whole!r} is implausibly large")
        width = len(low_text)
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def _expand_entry(entry: str, whole: str) -> list[str]:
    """One comma-free entry such as ``r[1-2]n[01-03]`` -> its hosts."""
    # Alternate literal text and bracket bodies: ['r', '1-2', 'n', '01-03', ''].
    pieces = re.split(r"\[([^\]]*)\]", entry)
    literals = pieces[0::2]
    choices = [_expand_ranges(body, whole) for body in pieces[1::2]]
    hosts = []
    for combination in product(*choices):
        name = literals[0]
        for value, literal in zip(combination, literals[1:]):
            name += value + literal
        hosts.append(name)
    return hosts


def expand_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list into host names, in Slurm's order.

    Args:
        text: a list such as ``node[9-10,12],gpu-a[01-03]`` (``SLURM_JOB_NODELIST``, ``SLURM_STEP_NODELIST``).

    Returns:
        The host names, in order, duplicates kept.

    Raises:
        UsageError: the list is empty or malformed (unbalanced brackets, a backwards or non-numeric range).
    """
    text = text.strip()
    if not text:
        raise UsageError("empty Slurm host list")
    hosts: list[str] = []
    for entry in _split_top_level(text):
        entry = entry.strip()
        if not entry:
            raise UsageError(f"empty entry in Slurm host list {text!r}")
        hosts.extend(_expand_entry(entry, text))
        if len(hosts) > _MAX_HOSTS:
            raise UsageError(f"Slurm host list {text!r} expands to more than {_MAX_HOSTS} hosts")
    return hosts


def expand_tasks_per_node(text: str) -> list[int]:
    """Expand Slurm's per-node task counts: ``2(x3),1`` -> ``[2, 2, 2, 1]``.

    Args:
        text: ``SLURM_STEP_TASKS_PER_NODE`` or ``SLURM_TASKS_PER_NODE``.

    Raises:
        UsageError: the text is not in Slurm's ``N`` / ``N(xM)`` comma-separated form.
    """
    counts: list[int] = []
    for piece in text.strip().split(","):
        match = _COUNT.match(piece.strip())
        if not match:
            raise UsageError(f"bad Slurm tasks-per-node entry {piece!r} in {text!r}", hint="expected e.g. 2(x3),1")
        repeat = int(match.group(2) or 1)
        if repeat > _MAX_HOSTS:
            raise UsageError(f"Slurm tasks-per-node entry {piece!r} is implausibly large")
        counts.extend([int(match.group(1))] * repeat)
    return counts
