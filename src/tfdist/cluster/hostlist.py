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

import math
import re
from itertools import product

from tfdist.cluster.limits import MAX_DIGITS, MAX_HOST_CHARS, MAX_HOSTS, MAX_TASKS_PER_NODE
from tfdist.errors import UsageError

_RANGE = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})(?:-([0-9]{{1,{MAX_DIGITS}}}))?")
_COUNT = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})(?:\(x([0-9]{{1,{MAX_DIGITS}}})\))?")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are outside brackets."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise UsageError(f"nested brackets in Slurm host list {_short(text)}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"unbalanced ']' in Slurm host list {_short(text)}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise UsageError(f"unclosed '[' in Slurm host list {_short(text)}")
    parts.append("".join(current))
    return parts


def _expand_ranges(body: str, whole: str) -> list[str]:
    """``9-10,12`` -> ``['9', '10', '12']``, keeping zero padding."""
    values: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        match = _RANGE.fullmatch(piece)
        if not match:
            raise UsageError(f"bad range {piece!r} in Slurm host list {_short(whole)}", hint="ranges look like 01-04")
        low_text, high_text = match.group(1), match.group(2)
        low = int(low_text)
        high = low if high_text is None else int(high_text)
        if high < low:
            raise UsageError(f"range {piece!r} runs backwards in Slurm host list {_short(whole)}")
        if high - low >= MAX_HOSTS:
            raise UsageError(f"range {piece!r} in Slurm host list {_short(whole)} is implausibly large")
        if len(values) + high - low >= MAX_HOSTS:
            raise UsageError(f"Slurm host list {_short(whole)} expands to more than {MAX_HOSTS} hosts")
        width = len(low_text)
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def _short(text: str) -> str:
    """``text`` quoted for a message, cut to a readable length."""
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


def _expand_entry(entry: str, whole: str, budget: int) -> list[str]:
    """One comma-free entry such as ``r[1-2]n[01-03]`` -> its hosts."""
    # Alternate literal text and bracket bodies: ['r', '1-2', 'n', '01-03', ''].
    pieces = re.split(r"\[([^\]]*)\]", entry)
    literals = pieces[0::2]
    # Check the product before multiplying out (r[0-999999]n[0-999999] is 10^12 names), bracket by bracket.
    choices: list[list[str]] = []
    names = 1
    for body in pieces[1::2]:
        choices.append(_expand_ranges(body, whole))
        names = math.prod(len(c) for c in choices)
        if names > budget:
            break
    if names > budget:
        raise UsageError(f"Slurm host list {_short(whole)} expands to more than {MAX_HOSTS} hosts")
    longest = sum(map(len, literals)) + sum(max(map(len, c)) for c in choices)
    if longest > MAX_HOST_CHARS:
        raise UsageError(f"Slurm host list {_short(whole)} makes host names longer than {MAX_HOST_CHARS} characters")
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
            raise UsageError(f"empty entry in Slurm host list {_short(text)}")
        hosts.extend(_expand_entry(entry, text, MAX_HOSTS - len(hosts)))
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
        match = _COUNT.fullmatch(piece.strip())
        if not match:
            raise UsageError(f"bad Slurm tasks-per-node entry {piece[:40]!r} in {_short(text)}",
                             hint="expected e.g. 2(x3),1")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if count > MAX_TASKS_PER_NODE or len(counts) + repeat > MAX_HOSTS:
            raise UsageError(f"Slurm tasks-per-node entry {piece!r} is implausibly large",
                             hint=f"at most {MAX_TASKS_PER_NODE} tasks on each of {MAX_HOSTS} nodes")
        counts.extend([count] * repeat)
    return counts
