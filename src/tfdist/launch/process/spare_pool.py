"""The launcher's side of warm spares (the spare's side is ``tfdist.launch.process.spare_process``): a pool of processes that have
imported TensorFlow already, started once the group trains and taken by the next attempt."""
from __future__ import annotations

from typing import Mapping

from tfdist.launch.process.spawn import Spare, spawn_spare
from tfdist.protocol import Command


class SparePool:
    def __init__(self, command: Command, env: Mapping[str, str]) -> None:
        if not command.is_python:
            raise ValueError("warm spares need a Python command")
        self.command = command
        self.env = dict(env)
        self._spares: list[Spare] = []

    def __len__(self) -> int:
        return len(self._spares)

    def fill(self, count: int, preload: list[str] | None = None) -> None:
        while len(self._spares) < count:
            self._spares.append(spawn_spare(self.command.program, self.env, preload))

    def take(self) -> Spare | None:
        while self._spares:
            spare = self._spares.pop()
            if spare.alive:
                return spare
            spare.discard()
        return None

    @property
    def pids(self) -> list[int]:
        return [s.popen.pid for s in self._spares]

    def discard_all(self) -> None:
        while self._spares:
            self._spares.pop().discard()
