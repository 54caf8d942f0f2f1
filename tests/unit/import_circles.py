"""Import circles in a package, counting every import: module-level, function-level and ``TYPE_CHECKING`` ones.

A circle closed by a function-level import still makes the modules one unit: none can be read, tested or moved
without the others, and the order of imports decides what works. So every ``import`` statement is an edge here,
wherever it stands. Two views, both for the whole package:

- modules: ``a`` imports ``b`` (or a name from it) and ``b``, through any path, imports ``a``;
- rooms: the sub-packages and modules side by side in one package (``launch/local`` and ``launch/flight``), each
  taken with everything inside it; a circle between two rooms is a circle of the design even when no two modules
  close one.

Each circle found is named as a path of imports with the file and line of each. tests/unit/test_cluster_single_facts.py
runs it over tfdist (sharing that module's one parse of the source); tests/unit/test_import_circles.py tests it.
"""
from __future__ import annotations

import ast
from collections import deque
from pathlib import Path
from typing import Mapping

#: module -> {module it imports: the line of the first such import}
Graph = dict[str, dict[str, int]]


def _module_names(root: Path, package: str) -> dict[str, Path]:
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = (package, *path.relative_to(root).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _targets(tree: ast.AST, here: str, is_package: bool, known: dict[str, Path]) -> list[tuple[str, int]]:
    """(module named, line) for every import in the tree. ``from p import n`` names the module ``p.n`` when there is
    one (importing a submodule does not need ``p``'s own names), else ``p``; a relative import is resolved from
    ``here``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = (here if is_package else here.rpartition(".")[0]).split(".")
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in known else base, node.lineno))
    return found


def import_graph(root: Path, package: str, trees: Mapping[Path, ast.AST] | None = None) -> Graph:
    """Every module of the package under ``root`` -> the modules of that package it imports anywhere. Importing
    ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``: those are edges too, except to the importer's own
    packages (they are already being imported when it runs). ``trees``: the files already parsed, by path."""
    known = _module_names(root, package)
    graph: Graph = {}
    for name, path in known.items():
        tree = (trees or {}).get(path) or ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        own = {name, *_ancestors(name)}
        edges: dict[str, int] = {}
        for target, line in _targets(tree, name, path.name == "__init__.py", known):
            while target and target not in known:  # "a.b.Name": the module a.b
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            for module in (target, *(p for p in _ancestors(target) if p not in own)):
                edges.setdefault(module, line)
        graph[name] = edges
    return graph


def rooms_graph(graph: Graph, package: str) -> Graph:
    """The rooms side by side directly in ``package`` -> the rooms they import (line: the first such import)."""
    def room(module: str) -> str | None:
        if not module.startswith(package + "."):
            return None
        return f"{package}.{module[len(package) + 1:].split('.')[0]}"

    rooms: Graph = {}
    for module, edges in graph.items():
        here = room(module)
        if here is None:
            continue
        rooms.setdefault(here, {})
        for target, line in edges.items():
            there = room(target)
            if there is not None and there != here:
                rooms[here].setdefault(there, line)
    return rooms


def strongly_connected(graph: Graph) -> list[list[str]]:
    """The groups of two or more modules that all reach each other (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            here, todo = work[-1]
            step = next(todo, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[here] = min(low[here], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[here])
            if low[here] == index[here]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == here:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def one_circle(graph: Graph, group: list[str]) -> list[str]:
    """The shortest circle through the group's first module, as the list of modules (the first again at the end)."""
    start, inside = group[0], set(group)
    came_from = {start: ""}
    queue = deque([start])
    while queue:
        here = queue.popleft()
        for there in sorted(graph.get(here, ())):
            if there == start:
                path = [here]
                while came_from[path[-1]]:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if there in inside and there not in came_from:
                came_from[there] = here
                queue.append(there)
    raise AssertionError(f"{start} is in a circle but none was found")  # cannot happen for a strongly connected group


def _files(root: Path, package: str) -> dict[str, str]:
    """module -> its file as shown in a failure (``tfdist/launch/options.py``)."""
    return {name: str(path.relative_to(root.parent)) for name, path in _module_names(root, package).items()}


def describe(graph: Graph, group: list[str], files: dict[str, str]) -> str:
    """``a -> b (a.py:12) -> a (b.py:3)``, and every module of the group when the circle shown is not all of it."""
    circle = one_circle(graph, group)
    steps = [circle[0]] + [f"{b} ({files[a]}:{graph[a][b]})" for a, b in zip(circle, circle[1:])]
    more = f" [{len(group)} modules in this circle: {', '.join(group)}]" if len(group) > len(circle) - 1 else ""
    return " -> ".join(steps) + more


def module_circles(root: Path, package: str, trees: Mapping[Path, ast.AST] | None = None) -> list[str]:
    graph = import_graph(root, package, trees)
    files = _files(root, package)
    return [describe(graph, group, files) for group in strongly_connected(graph)]


def room_circles(root: Path, package: str, trees: Mapping[Path, ast.AST] | None = None) -> list[str]:
    graph = import_graph(root, package, trees)
    files = _files(root, package)
    found = []
    for room in sorted(name for name, path in _module_names(root, package).items() if path.name == "__init__.py"):
        rooms = rooms_graph(graph, room)
        for group in strongly_connected(rooms):
            circle = one_circle(rooms, group)
            more = f" [{len(group)} rooms in this circle: {', '.join(group)}]" if len(group) > len(circle) - 1 else ""
            found.append(f"in {room}: " + " -> ".join(
                [circle[0]] + [f"{b} (first: {_first_import(graph, a, b, files)})" for a, b in zip(circle, circle[1:])])
                + more)
    return found


def _inside(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def _first_import(graph: Graph, room: str, other: str, files: dict[str, str]) -> str:
    """Where a module of ``room`` first imports one of ``other``, naming the module imported (for a readable room
    circle)."""
    for module in sorted(graph):
        if _inside(module, room):
            targets = [(target, line) for target, line in graph[module].items() if _inside(target, other)]
            if targets:
                target, line = max(targets, key=lambda item: len(item[0]))
                return f"{files[module]}:{line} imports {target}"
    return "?"
