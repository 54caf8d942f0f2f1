"""Tiny version helpers: numeric tuples are all the doctor needs, and ``packaging`` costs start-up time."""

from __future__ import annotations

import re

_NUMBERS = re.compile(r"\d+")


def vtuple(version: str | None) -> tuple[int, ...]:
    """Leading numeric parts of ``version``: ``"555.42.06"`` -> ``(555, 42, 6)``, ``"2.21.0rc1"`` -> ``(2, 21, 0)``.

    Args:
        version: a dotted version string; ``None`` or text without digits gives ``()``.
    """
    if not version:
        return ()
    parts: list[int] = []
    for piece in version.strip().split("."):
        match = _NUMBERS.match(piece)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(piece):
            break
    return tuple(parts)


def minor_of(version: str) -> str:
    """``"2.21.0"`` -> ``"2.21"``; a version with fewer parts is returned as is."""
    parts = vtuple(version)
    return ".".join(str(p) for p in parts[:2]) if len(parts) >= 2 else version


def at_least(version: str | None, floor: str | None) -> bool:
    """True when ``version`` >= ``floor`` numerically (missing trailing parts count as 0)."""
    if not version or not floor:
        return False
    a, b = vtuple(version), vtuple(floor)
    width = max(len(a), len(b))
    return a + (0,) * (width - len(a)) >= b + (0,) * (width - len(b))
