"""The flight recorder's two rendezvous messages, checked like every other (:mod:`tfdist.launch.elastic.messages.protocol`).

- ``dump`` (rendezvous -> agent): read your tasks now, before anything is stopped; answer with ``evidence`` carrying
  the same ``request``.
- ``evidence`` (agent -> rendezvous): one machine's tasks (:mod:`tfdist.launch.flight.transfer` makes the fields,
  already cut to fit). ``request`` 0: unasked, from the machine whose task hung or failed; it starts the collection
  (the rendezvous then asks every other machine). ``note``: why there are no tasks (none running, recorder off).

Every field is bounded (texts, list lengths, numbers); a task's stacks are flat rows so that no message nests deeper
than ``MAX_DEPTH``. Registered with the other messages on import (``wire.py`` imports this module, so whatever
reads frames knows them).
"""
from __future__ import annotations

import math
from typing import Any

from tfdist.launch.elastic.messages.protocol import (MAX_SLOTS, Message, ProtocolError, _flag, _int, _list, _maybe, _message,
                                            _object, _text)
from tfdist.launch.flight import transfer as T

REASONS = ("hang", "task-failed")
_FIELDS = ("name", "pid", "step", "finished", "age", "exit_code", "gone", "state", "wchan", "stacks_from", "log",
           "output", "threads", "frames")


def _seconds(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= 1e9:
        raise ProtocolError(f"{what}: expected a number of seconds")
    return float(value)


def _maybe_flag(value: Any, what: str) -> bool | None:
    return None if value is None else _flag(value, what)


def check_task(value: Any, what: str = "tasks[]") -> dict[str, Any]:
    """One task of an ``evidence`` message, every field checked and bounded (see ``transfer.task_fields``)."""
    raw = _object(value, what, len(_FIELDS))
    unknown = set(raw) - set(_FIELDS)
    if unknown:
        raise ProtocolError(f"{what}: unknown field {sorted(unknown)[0][:40]!r}")
    threads = []
    for row in _list(raw.get("threads"), f"{what}.threads", T.MAX_THREADS + 1):
        name, idle, wchan = _list(row, f"{what}.threads[]", 3) + [None] * (3 - len(row))
        threads.append([_text(name, f"{what}.threads[].name", T.MAX_NAME),
                        _maybe_flag(idle, f"{what}.threads[].idle"), _text(wchan, f"{what}.threads[].wchan",
                                                                           T.MAX_NAME)])
    frames = []
    for row in _list(raw.get("frames"), f"{what}.frames", T.MAX_FRAMES):
        index, function, file, line = _list(row, f"{what}.frames[]", 4) + [None] * (4 - len(row))
        frames.append([_int(index, f"{what}.frames[].thread", 0, max(0, len(threads) - 1)),
                       _text(function, f"{what}.frames[].function", T.MAX_FUNCTION),
                       _text(file, f"{what}.frames[].file", T.MAX_PATH), _int(line, f"{what}.frames[].line", 0,
                                                                               2**31)])
    state = _text(raw.get("state", ""), f"{what}.state", 4)
    return {
        "name": _text(raw.get("name"), f"{what}.name", T.MAX_SHORT), "pid": _maybe(_int, raw.get("pid"), "pid", 1),
        "step": _maybe(_int, raw.get("step"), f"{what}.step", -1),
        "finished": _flag(raw.get("finished", False), f"{what}.finished"),
        "age": _maybe(_seconds, raw.get("age"), f"{what}.age"),
        "exit_code": _maybe(_int, raw.get("exit_code"), f"{what}.exit_code", -255, 255),
        "gone": _flag(raw.get("gone", False), f"{what}.gone"), "state": state,
        "wchan": _text(raw.get("wchan", ""), f"{what}.wchan", T.MAX_NAME),
        "stacks_from": _text(raw.get("stacks_from", ""), f"{what}.stacks_from", T.MAX_LINE),
        "log": _text(raw.get("log", ""), f"{what}.log", T.MAX_PATH),
        "output": [_text(line, f"{what}.output[]", T.MAX_LINE)
                   for line in _list(raw.get("output", []), f"{what}.output", T.MAX_OUTPUT)],
        "threads": threads, "frames": frames,
    }


def _reason(raw: dict[str, Any]) -> str:
    """Why the rendezvous asked: one of REASONS (a dump and its evidence carry the same field)."""
    reason = raw.get("reason", "hang")
    if reason not in REASONS:
        raise ProtocolError(f"reason: expected one of {', '.join(REASONS)}")
    return reason


@_message("dump")
class Dump(Message):
    round: int
    request: int
    reason: str = "hang"

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Dump":
        reason = _reason(raw)
        return cls(round=_int(raw.get("round"), "round"), request=_int(raw.get("request"), "request", 1, 2**31),
                   reason=reason)


@_message("evidence")
class Evidence(Message):
    round: int
    request: int
    tasks: list[dict[str, Any]]
    reason: str = "hang"
    watchdog: str | None = None
    note: str = ""
    cut: bool = False

    @classmethod
    def check(cls, raw: dict[str, Any]) -> "Evidence":
        reason = _reason(raw)
        return cls(round=_int(raw.get("round"), "round"), request=_int(raw.get("request"), "request", 0, 2**31),
                   tasks=[check_task(t) for t in _list(raw.get("tasks"), "tasks", MAX_SLOTS)], reason=reason,
                   watchdog=_maybe(_text, raw.get("watchdog"), "watchdog", T.MAX_SHORT),
                   note=_text(raw.get("note", ""), "note", T.MAX_LINE), cut=_flag(raw.get("cut", False), "cut"))
