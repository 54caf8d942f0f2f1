"""No regular expression in tfdist ends a match with ``$``.

Outside MULTILINE mode ``$`` also matches just before a trailing newline, so ``re.match(r"^[a-z]+$", "digits\\n")``
accepts a value that then carries its newline into a generated file (issue 13). Validation uses ``re.fullmatch``
(or ``\\Z``) instead. This test reads every module under src/tfdist (the AST, so strings and comments that merely
mention a ``$`` do not count) and every ``pattern`` in the packaged data, and fails on any ``$`` anchor outside a
MULTILINE search. A pattern built at run time from data is listed in ``DATA_DRIVEN`` with where its text is checked.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import tfdist

SOURCE = Path(tfdist.__file__).parent
REGEX_FUNCTIONS = {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer"}
# Patterns the AST cannot see: file, expression -> why it is safe.
DATA_DRIVEN = {
    ("compat/tables.py", "r['pattern']"): "gpus.json patterns, scanned by test_data_patterns_have_no_dollar",
    ("doctor/verify.py", "c['pattern']"): "tf_log_causes.json patterns, scanned by test_data_patterns_have_no_dollar",
    ("doctor/owners.py", "compat.load_data('cuda_libs')['dpkg_owner_pattern']"):
        "cuda_libs.json, scanned by test_data_patterns_have_no_dollar",
    ("mirror/agents.py", "re.search(pattern, done.stdout)"):
        "_version_of's callers in mirror/agents.py pass literal patterns (^pip, ^uv, ^rustc (\\S+)), no $ anchor",
}


def dollar_anchors(pattern: str) -> int:
    """How many ``$`` anchors a pattern holds (an escaped ``\\$`` or one inside ``[...]`` is a literal dollar)."""
    count, index, in_class = 0, 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            index += 1 + (pattern[index + 1:index + 2] == "^")
            index += pattern[index:index + 1] == "]"  # "[]...]" and "[^]...]" start with a literal ']'
            continue
        elif char == "$":
            count += 1
        index += 1
    return count


@dataclass(frozen=True)
class RegexCall:
    file: str
    line: int
    call: str
    pieces: tuple[str, ...] | None  # the pattern's literal text, or None when it is built at run time
    multiline: bool


def _module_strings(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.update({target.id: node.value.value for target in node.targets if isinstance(target, ast.Name)})
    return found


def _pattern_text(node: ast.expr, strings: dict[str, str]) -> tuple[str, ...] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return (node.value,)
    if isinstance(node, ast.Name) and node.id in strings:
        return (strings[node.id],)
    if isinstance(node, ast.JoinedStr):  # an f-string: the literal parts, with each {value} as a plain character
        return ("".join(part.value if isinstance(part, ast.Constant) else "0" for part in node.values),)
    if isinstance(node, ast.BinOp):  # "a" + B: the parts that are known
        parts = [_pattern_text(side, strings) for side in (node.left, node.right)]
        return tuple(piece for part in parts if part for piece in part) or None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _pattern_text(node.func.value, strings)  # "{0}(?:\\.{0})*".format(...): its template
    return None  # a subscript, a parameter...: built at run time


def _is_multiline(call: ast.Call, pieces: tuple[str, ...] | None) -> bool:
    flags = [*call.args[1:], *(keyword.value for keyword in call.keywords if keyword.arg == "flags")]
    named = {n.attr for flag in flags for n in ast.walk(flag) if isinstance(n, ast.Attribute)}
    return bool(named & {"MULTILINE", "M"}) or any(piece.startswith("(?m") for piece in pieces or ())


def regex_calls() -> list[RegexCall]:
    calls = []
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        strings = _module_strings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and node.func.attr in REGEX_FUNCTIONS):
                continue
            pieces = _pattern_text(node.args[0], strings)
            calls.append(RegexCall(path.relative_to(SOURCE).as_posix(), node.lineno, ast.unparse(node)[:100], pieces,
                                   _is_multiline(node, pieces)))
    return calls


def test_the_scanner_sees_dollars_and_ignores_literal_ones() -> None:
    assert [dollar_anchors(p) for p in (r"^[a-z]+$", r"a$|b$", r"x\Z", r"\$HOME", r"[$]", r"[]$]", r"[^]$]x$")] == \
        [1, 2, 0, 0, 0, 0, 1]


def test_the_scan_finds_the_validation_patterns() -> None:
    # A control: the validation module's patterns are found, so an empty result below means something.
    seen = {call.file for call in regex_calls() if call.pieces}
    assert {"validate.py", "mirror/catalog.py", "cluster/hostlist.py", "mirror/pipconf.py"} <= seen


def test_no_pattern_ends_a_match_with_dollar() -> None:
    offenders = [f"{c.file}:{c.line}: {c.call}" for c in regex_calls()
                 if not c.multiline and c.pieces and any(dollar_anchors(piece) for piece in c.pieces)]
    assert offenders == [], "use re.fullmatch or \\Z (a '$' also matches before a trailing newline):\n" + \
        "\n".join(offenders)


def test_every_run_time_pattern_is_accounted_for() -> None:
    unknown = {(c.file, c.call) for c in regex_calls() if c.pieces is None and not c.multiline}
    listed = set()
    for file, expression in DATA_DRIVEN:
        listed |= {(f, call) for f, call in unknown if f == file and expression in call}
    assert unknown - listed == set(), "a pattern built at run time: check its source and add it to DATA_DRIVEN"
    assert {file for file, _ in DATA_DRIVEN} == {file for file, _ in listed}, "a stale DATA_DRIVEN entry"


def _patterns(document: object) -> list[str]:
    if isinstance(document, dict):
        return [v for k, v in document.items() if "pattern" in k and isinstance(v, str)] + \
            [p for v in document.values() for p in _patterns(v)]
    if isinstance(document, list):
        return [p for v in document for p in _patterns(v)]
    return []


def test_data_patterns_have_no_dollar() -> None:
    found = {path.name: _patterns(json.loads(path.read_text(encoding="utf-8")))
             for path in (SOURCE / "data").rglob("*.json")}
    assert sum(map(len, found.values())) >= 10  # the GPU table alone has more: the scan reads real patterns
    offenders = [(name, p) for name, patterns in found.items() for p in patterns if dollar_anchors(p)]
    assert offenders == []
