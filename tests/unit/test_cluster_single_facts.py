"""Each fact lives in one place: TF_CONFIG is parsed only in tfdist.cluster, the leader rule is written once, tf-keras
is looked up once, the preemption exit code defined once; and the layers import only downwards. These scan the
source, so a new copy or a new crossing anywhere fails here."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import tfdist
from tests.unit.import_circles import import_graph, module_circles, room_circles

SRC = Path(tfdist.__file__).resolve().parent
CLUSTER = SRC / "cluster"


@functools.lru_cache(maxsize=1)
def _modules() -> tuple[tuple[Path, ast.AST], ...]:
    return tuple((path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
                 for path in sorted(SRC.rglob("*.py")))


def _mentions_tf_config(node: ast.AST) -> bool:
    """Whether an expression names the TF_CONFIG variable (the literal or the constants' name)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value == "TF_CONFIG":
            return True
        if isinstance(sub, ast.Name) and sub.id == "TF_CONFIG":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "TF_CONFIG":
            return True
    return False


def _is_call_to(node: ast.Call, names: set[str]) -> bool:
    func = node.func
    return (isinstance(func, ast.Attribute) and func.attr in names) or (isinstance(func, ast.Name) and func.id in names)


def _tf_config_parsers(tree: ast.AST) -> list[int]:
    """Lines where TF_CONFIG's text is decoded: json.loads/json.load over an expression that names TF_CONFIG,
    or over a name assigned from a read of TF_CONFIG in the same function."""
    if not _mentions_tf_config(tree):  # one walk: a module that never names TF_CONFIG cannot decode it
        return []
    lines = []
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        tainted = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and _mentions_tf_config(node.value):
                tainted.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(scope):
            if isinstance(node, ast.Call) and _is_call_to(node, {"loads", "load", "literal_eval"}):
                args = list(node.args) + [k.value for k in node.keywords]
                if any(_mentions_tf_config(a) or any(isinstance(n, ast.Name) and n.id in tainted
                                                     for n in ast.walk(a)) for a in args):
                    lines.append(node.lineno)
    return sorted(set(lines))


def test_only_the_cluster_package_parses_tf_config():
    offenders = [f"{path.relative_to(SRC)}:{line}" for path, tree in _modules() if CLUSTER not in path.parents
                 for line in _tf_config_parsers(tree)]
    assert offenders == []


def test_the_scan_would_catch_a_parser():
    # The detector itself must fire on the shapes the old code had, or the test above proves nothing.
    samples = [
        "import json, os\nx = json.loads(os.environ['TF_CONFIG'])",
        "import json\ndef f(env):\n    text = env.get(C.TF_CONFIG, '')\n    return json.loads(text)",
        "import json\ndef f(env):\n    return json.loads(env.get(TF_CONFIG) or '{}').get('task')",
    ]
    for sample in samples:
        assert _tf_config_parsers(ast.parse(sample)), sample
    assert not _tf_config_parsers(ast.parse("import json\nx = json.loads(open('f').read())"))


def _names_chief_zero(node: ast.AST) -> bool:
    """``TaskId("chief", 0)`` or ``("chief", 0)``: the shape every copy of the leader rule had."""
    args = node.args if isinstance(node, ast.Call) and _is_call_to(node, {"TaskId"}) else (
        node.elts if isinstance(node, ast.Tuple) else None)
    return (args is not None and len(args) == 2 and all(isinstance(a, ast.Constant) for a in args)
            and (args[0].value, args[1].value) == ("chief", 0))


def test_the_leader_rule_is_written_once():
    owners = sorted({str(path.relative_to(SRC)) for path, tree in _modules() for node in ast.walk(tree)
                     if _names_chief_zero(node)})
    assert owners == ["cluster/roles.py"]


def test_tf_keras_is_looked_up_once():
    owners = [str(path.relative_to(SRC)) for path, tree in _modules() for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and node.value == "tf_keras"]
    assert sorted(set(owners)) == ["compat/keras.py"]


def test_the_preemption_exit_code_is_defined_once():
    owners = [str(path.relative_to(SRC)) for path, tree in _modules() for node in ast.walk(tree)
              if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PREEMPTED_EXIT_CODE"
                                                      for t in node.targets)]
    assert owners == ["protocol/records.py"]


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# package -> what it must never import, directly or through anything it imports (lazily or not)
LAYERS = {
    "protocol": ("tensorflow", "tfdist.runtime", "tfdist.launch", "tfdist.doctor", "tfdist.deploy", "tfdist.cli",
                 "tfdist.cluster", "tfdist.mirror", "tfdist.observability", "tfdist.compat", "tfdist.constants"),
    "cluster": ("tensorflow", "tfdist.runtime", "tfdist.launch", "tfdist.doctor", "tfdist.deploy", "tfdist.cli"),
    "compat": ("tensorflow", "tfdist.runtime", "tfdist.launch", "tfdist.doctor", "tfdist.deploy", "tfdist.cli"),
    "observability": ("tensorflow", "tfdist.runtime", "tfdist.launch", "tfdist.doctor", "tfdist.deploy"),
    "mirror": ("tensorflow", "tfdist.runtime", "tfdist.launch", "tfdist.doctor", "tfdist.deploy", "tfdist.cli"),
    "doctor": ("tfdist.launch", "tfdist.cli"),
    "launch": ("tfdist.runtime", "tfdist.doctor"),
    "deploy": ("tfdist.doctor", "tfdist.runtime", "tfdist.launch"),
    "runtime": ("tfdist.launch", "tfdist.doctor", "tfdist.deploy", "tfdist.cli"),
}


def _module_name(path: Path) -> str:
    parts = ("tfdist", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=1)
def _import_graph() -> dict[str, set[str]]:
    """tfdist module -> the tfdist modules it imports anywhere in its body (function-level imports included),
    plus the packages each of those lives in (importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__``)."""
    known = {_module_name(path) for path, _ in _modules()}
    graph: dict[str, set[str]] = {}
    for path, tree in _modules():
        edges = set()
        for name in _imports(tree):
            # "from a.b import c" names a.b.c, which is a module or an attribute of a.b: keep what exists
            while name and name not in known:
                name = name.rpartition(".")[0]
            while name:
                edges.add(name)
                name = name.rpartition(".")[0]
        graph[_module_name(path)] = edges
    return graph


def _reaches(start: str) -> dict[str, str]:
    """Every module reachable from ``start`` -> the module that imports it (for a readable path)."""
    graph = _import_graph()
    parent = {start: ""}
    todo = [start]
    while todo:
        here = todo.pop()
        for there in sorted(graph.get(here, ())):
            if there not in parent:
                parent[there] = here
                todo.append(there)
    return parent


def _path_to(parent: dict[str, str], end: str) -> str:
    chain = [end]
    while parent[chain[-1]]:
        chain.append(parent[chain[-1]])
    return " -> ".join(reversed(chain))


def _banned(name: str, banned: tuple[str, ...]) -> bool:
    return any(name == b or name.startswith(b + ".") for b in banned)


def test_layers_import_only_downwards():
    # Direct imports, including third-party ones (tensorflow), anywhere in a module.
    crossings = []
    for path, tree in _modules():
        package = path.relative_to(SRC).parts[0].removesuffix(".py")
        for name in _imports(tree):
            if _banned(name, LAYERS.get(package, ())):
                crossings.append(f"{path.relative_to(SRC)} imports {name}")
    assert crossings == []


def test_layers_never_reach_upwards_through_other_modules():
    # Transitive: importing a cluster module must not load tfdist.launch through tfdist.constants, for example.
    crossings = []
    for module in sorted(_import_graph()):
        package = (module.split(".") + [""])[1]
        banned = tuple(b for b in LAYERS.get(package, ()) if b.startswith("tfdist."))
        parent = _reaches(module)
        crossings += [_path_to(parent, m) for m in sorted(parent) if _banned(m, banned)]
    assert crossings == []


def test_the_transitive_check_sees_lazy_imports(tmp_path):
    # The check above is only as good as the graph: a function-level import must be an edge.
    tree = ast.parse("def f():\n    from tfdist.launch.local import supervisor\n")
    assert "tfdist.launch.local.supervisor" in _imports(tree)
    assert "tfdist.launch" in _reaches("tfdist.cli.launch")


def _trees() -> dict[Path, ast.AST]:
    return dict(_modules())


def test_no_import_circle_between_modules_counting_every_import():
    # Every import counts, function-level and TYPE_CHECKING ones too: a circle closed lazily still makes its modules
    # one unit that cannot be read, tested or moved apart (tests/unit/import_circles.py says how it is found).
    assert module_circles(SRC, "tfdist", _trees()) == []


def test_no_import_circle_between_rooms():
    # The sub-packages and modules side by side in one package (launch/local, launch/flight, ...), each with
    # everything inside it: a circle between rooms is one even when no two modules close it.
    assert room_circles(SRC, "tfdist", _trees()) == []


# -- inside the launcher: the entry (launch/entry) on top, the leaves below -------------------------------------------
LEAVES = {"tfdist.launch.options", "tfdist.launch.spec", "tfdist.launch.outcome", "tfdist.launch.seams",
          "tfdist.launch.clues"}


@functools.lru_cache(maxsize=1)
def _launch_graph() -> dict[str, dict[str, int]]:
    return import_graph(SRC, "tfdist", _trees())


def test_only_the_cli_imports_the_entry():
    # The entry knows every room; a room that imported it would close a circle through it.
    importers = sorted(module for module, edges in _launch_graph().items()
                       if any(t == "tfdist.launch.entry" or t.startswith("tfdist.launch.entry.") for t in edges)
                       and not module.startswith(("tfdist.launch.entry", "tfdist.cli.")))
    assert importers == []


def test_the_leaves_import_no_other_room_of_the_launcher():
    graph = _launch_graph()
    reaching = {leaf: sorted(t for t in graph[leaf] if t.startswith("tfdist.launch.") and t not in LEAVES)
                for leaf in sorted(LEAVES)}
    assert reaching == {leaf: [] for leaf in sorted(LEAVES)}


MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines():
    long = [f"{path.relative_to(SRC)}: {n}" for path, _ in _modules()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert long == []


def test_ipv6_bracketing_is_written_once():
    # The shape of every copy: f"[{host}]:{port}". Only cluster/address.py may write it.
    owners = sorted({str(path.relative_to(SRC)) for path, tree in _modules() for node in ast.walk(tree)
                     if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant)
                     and node.values[0].value == "[" and any(isinstance(v, ast.Constant) and str(v.value).startswith("]:")
                                                             for v in node.values)})
    assert owners == ["cluster/address.py"]
