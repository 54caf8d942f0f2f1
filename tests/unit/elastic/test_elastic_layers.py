"""The multi-machine room's layers, as a table, over every import of every module under launch/elastic/ (function-
level and TYPE_CHECKING ones too): the typed messages below the rendezvous rules; the rules without sockets and
without a backend; the backends side by side; the agent above messages and rules, never importing a backend; the
composition (``elastic/backends.py``) alone knowing the agent and both backends."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tfdist.launch.elastic as elastic_room

ELASTIC = Path(elastic_room.__file__).parent
ROOM = "tfdist.launch.elastic"

# package (or top-level module) -> what it must never import (prefixes of module names)
NEVER = {
    "messages": (f"{ROOM}.rendezvous", f"{ROOM}.tcp", f"{ROOM}.etcd", f"{ROOM}.agent", f"{ROOM}.backends", "socket"),
    "rendezvous": (f"{ROOM}.tcp", f"{ROOM}.etcd", f"{ROOM}.agent", f"{ROOM}.backends", "socket", "selectors", "ssl"),
    "tcp": (f"{ROOM}.etcd", f"{ROOM}.agent", f"{ROOM}.backends"),
    "etcd": (f"{ROOM}.tcp", f"{ROOM}.agent", f"{ROOM}.backends", "socket"),
    "agent": (f"{ROOM}.tcp", f"{ROOM}.etcd", f"{ROOM}.backends"),
    "backend": (f"{ROOM}.tcp", f"{ROOM}.etcd", f"{ROOM}.agent", f"{ROOM}.backends"),
    "netaddr": (ROOM,),
    "secret": (ROOM,),
}


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement is (``from a import b`` counts as a and a.b)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def layer_of(path: Path) -> str:
    relative = path.relative_to(ELASTIC)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


MODULES = sorted(p for p in ELASTIC.rglob("*.py") if p.name != "__init__.py" or p.parent != ELASTIC)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ELASTIC)))
def test_no_module_reaches_a_layer_it_must_not(path):
    layer = layer_of(path)
    if layer == "backends":
        pytest.skip("the composition: it knows the agent and both backends")
    assert layer in NEVER, f"{path.relative_to(ELASTIC)}: a layer the table does not know (add it to NEVER)"
    forbidden = sorted(name for name in imported(path) for prefix in NEVER[layer]
                       if name == prefix or name.startswith(prefix + "."))
    assert forbidden == [], f"{path.relative_to(ELASTIC)} ({layer}/) imports {forbidden}"


def test_the_room_holds_at_most_eight_modules_directly_and_the_five_packages():
    direct = sorted(p.name for p in ELASTIC.glob("*.py"))
    assert len(direct) <= 8, direct
    assert {p.name for p in ELASTIC.iterdir() if (p / "__init__.py").exists()} == {
        "rendezvous", "messages", "tcp", "etcd", "agent"}


def test_only_the_composition_knows_the_agent_and_a_backend_together():
    knowing = [str(p.relative_to(ELASTIC)) for p in MODULES
               if any(n.startswith(f"{ROOM}.agent") for n in imported(p))
               and any(n.startswith((f"{ROOM}.tcp", f"{ROOM}.etcd")) for n in imported(p))]
    assert knowing == ["backends.py"]


def test_the_scan_sees_function_level_and_type_checking_imports(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tfdist.launch.elastic.tcp import auth\n"
                       "def f():\n    import socket\n    from tfdist.launch.elastic.etcd.link import EtcdLink\n")
    assert {"tfdist.launch.elastic.tcp", "socket", "tfdist.launch.elastic.etcd.link"} <= imported(planted)
