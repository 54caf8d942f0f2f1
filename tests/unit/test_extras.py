"""Each install extra brings exactly one TensorFlow distribution. tf-keras declares `tensorflow` as a dependency (read
here from its installed metadata when present), so next to it only `tensorflow` itself avoids a second distribution
sharing the `tensorflow/` package folder."""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
TF_DISTRIBUTIONS = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
                    "tensorflow-aarch64", "tensorflow-cpu-aws", "tf-nightly", "tf-nightly-cpu"}


def _names(requirements: list[str]) -> list[str]:
    return [re.match(r"[A-Za-z0-9._-]+", r).group(0).lower().replace("_", "-") for r in requirements]


def _expanded(extras: dict[str, list[str]], extra: str) -> list[str]:
    """The extra's requirements with tfdist's own extras (``tfdist[tensorboard]``) replaced by theirs, as pip does."""
    found = []
    for requirement in extras[extra]:
        own = re.fullmatch(r"tfdist\[([a-z0-9,-]+)\]", requirement)
        found += [r for name in own.group(1).split(",") for r in _expanded(extras, name)] if own else [requirement]
    return found


@pytest.mark.parametrize("extra", ["cpu", "gpu"])
def test_one_tensorflow_per_extra(extra: str) -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    names = _names(_expanded(extras, extra))
    tensorflows = [n for n in names if n in TF_DISTRIBUTIONS]
    assert tensorflows == ["tensorflow"], f"[{extra}] brings {tensorflows}"
    assert "tf-keras" in names and "tensorboard" in names


def test_tf_keras_requires_tensorflow_itself() -> None:
    try:
        requires = metadata.requires("tf-keras") or []
    except metadata.PackageNotFoundError:
        pytest.skip("tf-keras is not installed here; the extras test above still holds")
    assert "tensorflow" in _names([r for r in requires if "extra ==" not in r])


def test_uv_is_a_runtime_dependency() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert "uv" in _names(project["dependencies"])  # `tfdist lock` right after `pip install tfdist`
    assert "build" in _names(project["optional-dependencies"]["dev"])  # `make dist`


# -- tfdist.extras: the table of optional dependencies and the one way to import one ------------------------------

def test_every_extra_of_the_table_is_one_of_pyproject() -> None:
    from tfdist.extras import EXTRAS

    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    for name, extra in EXTRAS.items():
        assert extra.name == name and extra.install == f"pip install 'tfdist[{name}]'"


def test_each_module_of_the_table_comes_from_its_extra() -> None:
    from tfdist.extras import EXTRAS

    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    providers = metadata.packages_distributions()
    checked = 0
    for name, extra in EXTRAS.items():
        wanted = set(_names(_expanded(declared, name)))
        for module in extra.modules:
            if module in providers:  # installed here (the dev extra installs them all)
                assert {d.lower().replace("_", "-") for d in providers[module]} & wanted, (name, module)
                checked += 1
    if not checked:
        pytest.skip("no optional dependency is installed here")


def _imports_of(path: Path) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found


# Where tfdist imports an optional dependency itself, each after the check that says what to install has run.
CHECKED_ELSEWHERE = {
    "launch/elastic/etcd/store.py": "pyetcd",  # --rdzv-backend etcd requires the etcd extra in launch/entry/across.py
}


def test_optional_modules_are_imported_only_through_the_table() -> None:
    from tfdist.extras import EXTRAS

    optional = {module for extra in EXTRAS.values() for module in extra.modules}
    source = PYPROJECT.parent / "src" / "tfdist"
    found = {str(path.relative_to(source)): _imports_of(path) & optional for path in source.rglob("*.py")
             if any(module in path.read_text() for module in optional)}  # parse only the files that may
    direct = {path: modules for path, modules in found.items() if modules}
    assert direct == {path: {module} for path, module in CHECKED_ELSEWHERE.items()}


def test_a_missing_module_names_the_extra_and_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.extras import MissingExtra, require
    from tfdist.status import ExitStatus

    monkeypatch.setitem(sys.modules, "pyetcd", None)  # what `import pyetcd` meets where it is not installed
    with pytest.raises(MissingExtra) as raised:
        require("etcd", "--rdzv-backend etcd")
    assert raised.value.one_line() == "--rdzv-backend etcd needs the etcd extra: pip install 'tfdist[etcd]'"
    assert raised.value.status is ExitStatus.USAGE and raised.value.reference == "missing-extra-etcd"


def test_an_install_that_fails_to_import_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.extras import MissingExtra, require

    # As etcd3 does with a newer protobuf: the package is there, its import raises something else than ImportError.
    (tmp_path / "tfdist_test_broken.py").write_text("raise TypeError('Descriptors cannot be created directly.\\n'"
                                                    " 'more')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(MissingExtra) as raised:
        require("etcd", "--rdzv-backend etcd", module="tfdist_test_broken")
    assert raised.value.one_line() == ("--rdzv-backend etcd needs the etcd extra (tfdist_test_broken does not import: "
                                       "TypeError: Descriptors cannot be created directly.): "
                                       "pip install 'tfdist[etcd]'")


def test_an_installed_module_is_returned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.extras import require

    (tmp_path / "tfdist_test_present.py").write_text("VALUE = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert require("examples", "a test", module="tfdist_test_present").VALUE == 7


@pytest.mark.parametrize("is_chief, said", [(True, 1), (False, 0)])
def test_summaries_without_tensorboard_are_off_with_one_line_from_the_chief(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], is_chief: bool, said: int) -> None:
    from tfdist.runtime.tensorboard import summaries_available

    monkeypatch.setitem(sys.modules, "tensorboard", None)
    assert summaries_available(is_chief) is False
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == said
    if said:
        assert captured.err == ("tfdist: warning: TensorBoard in tfdist.runtime.callbacks needs the tensorboard "
                                "extra: pip install 'tfdist[tensorboard]'; training on without TensorBoard summaries "
                                "(tensorboard=False: none wanted)\n")


def test_only_tfdists_own_modules_that_need_an_extra_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tfdist.extras import MissingExtra, require_for_module

    monkeypatch.setitem(sys.modules, "sklearn", None)  # find_spec answers ValueError for it: not findable
    for module in ("tfdist.examples.digits", "tfdist.examples"):
        with pytest.raises(MissingExtra, match=r"^-m x needs the examples extra: pip install 'tfdist\[examples\]'$"):
            require_for_module(module, "-m x")
    for module in ("tfdist.examplesque", "train", "sklearn.datasets"):  # not ours: the task's own imports decide
        require_for_module(module, "-m x")
