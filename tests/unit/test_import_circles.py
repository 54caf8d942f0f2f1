"""The import-circle detector (tests/unit/import_circles.py) catches each shape of circle and names it; without that,
tfdist's own check in tests/unit/test_cluster_single_facts.py proves nothing."""
from __future__ import annotations

from pathlib import Path

from tests.unit.import_circles import module_circles, room_circles

def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(text)
    return root


def test_a_function_level_import_closes_a_circle(tmp_path):
    root = _package(tmp_path, {"a.py": "import pkg.b\n", "b.py": "def f():\n    from pkg.a import x\n"})
    assert module_circles(root, "pkg") == ["pkg.a -> pkg.b (pkg/a.py:1) -> pkg.a (pkg/b.py:2)"]


def test_a_type_checking_import_closes_a_circle(tmp_path):
    lazy = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import X\n"
    root = _package(tmp_path, {"a.py": "from pkg import b\n", "b.py": lazy})
    assert module_circles(root, "pkg") == ["pkg.a -> pkg.b (pkg/a.py:1) -> pkg.a (pkg/b.py:3)"]


def test_a_package_whose_init_imports_a_module_that_reads_the_init(tmp_path):
    # The shape of mirror/recipes before: __init__ builds its registry from modules that import its names.
    root = _package(tmp_path, {"r/__init__.py": "X = 1\ndef reg():\n    from pkg.r.one import One\n",
                               "r/one.py": "from pkg.r import X\n"})
    assert module_circles(root, "pkg") == ["pkg.r -> pkg.r.one (pkg/r/__init__.py:3) -> pkg.r (pkg/r/one.py:1)"]


def test_relative_imports_count(tmp_path):
    root = _package(tmp_path, {"s/a.py": "from . import b\n", "s/b.py": "from .a import X\n"})
    assert module_circles(root, "pkg") == ["pkg.s.a -> pkg.s.b (pkg/s/a.py:1) -> pkg.s.a (pkg/s/b.py:1)"]


def test_importing_a_sibling_submodule_through_the_package_is_no_circle(tmp_path):
    # runtime/__init__ imports runtime.training, which imports runtime.metrics as "from tfdist.runtime import metrics".
    root = _package(tmp_path, {"r/__init__.py": "from pkg.r.train import fit\n",
                               "r/train.py": "def fit():\n    from pkg.r import metrics\n", "r/metrics.py": ""})
    assert module_circles(root, "pkg") == []


def test_a_circle_between_rooms_without_a_circle_between_modules(tmp_path):
    root = _package(tmp_path, {"one/a.py": "from pkg.two.b import X\n", "one/c.py": "",
                               "two/b.py": "", "two/d.py": "from pkg.one.c import Y\n"})
    assert module_circles(root, "pkg") == []
    assert room_circles(root, "pkg") == [
        "in pkg: pkg.one -> pkg.two (first: pkg/one/a.py:1 imports pkg.two.b) -> pkg.one (first: pkg/two/d.py:1 "
        "imports pkg.one.c)"]


def test_a_longer_circle_is_named_in_order(tmp_path):
    root = _package(tmp_path, {"a.py": "import pkg.b\n", "b.py": "import pkg.c\n", "c.py": "import pkg.a\n"})
    assert module_circles(root, "pkg") == [
        "pkg.a -> pkg.b (pkg/a.py:1) -> pkg.c (pkg/b.py:1) -> pkg.a (pkg/c.py:1)"]
