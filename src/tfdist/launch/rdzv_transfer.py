"""Copying the latest complete backup to machines that do not share the checkpoint directory (filled in below)."""
from __future__ import annotations

from typing import Any, Callable


class BackupRelay:
    def __init__(self, send: Callable[..., None]) -> None:
        self._send = send

    def plan(self, nodes: dict, action: Any) -> dict[int, dict]:
        return {}

    def on_upload(self, node_id: int, message: dict[str, Any]) -> None:
        return None


class BackupStore:
    def __init__(self, checkpoint_dir: str, job: str) -> None:
        self.dir = checkpoint_dir

    def manifest(self) -> dict | None:
        return None
