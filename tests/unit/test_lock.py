"""Lock building blocks: refusals from the compat data, the resolver call, mirror scrubbing, header, conda file."""
from __future__ import annotations

import functools

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfdist.deploy import lock as locking
from tfdist.deploy.lock import LockSpec
from tfdist.errors import TfdistError, UsageError
from tests import goldens

MIRROR = "https://mirror.example.cn/pypi/web/simple"
HASH_A, HASH_B = "a" * 64, "b" * 64
# What uv prints when a user's uv.toml sets emit-index-url / emit-index-annotation: the lines tfdist must drop.
UV_OUTPUT = f"""--index-url {MIRROR}

absl-py==2.5.1 \\
    --hash=sha256:{HASH_A} \\
    --hash=sha256:{HASH_B}
    # via tensorflow
    # from {MIRROR}
tensorflow==2.21.0 \\
    --hash=sha256:{HASH_A}
    # via -r requirements.in
tf-keras==2.21.0 \\
    --hash=sha256:{HASH_B}
    # via -r requirements.in
"""


check_golden = functools.partial(goldens.check_golden, "lock")


@pytest.mark.parametrize("field, value", [("tf", "two"), ("tf", "2.21\n"), ("python", "3.12\n"), ("python", " 3.12")])
def test_a_version_that_is_not_exactly_one_is_refused_when_the_spec_is_made(field: str, value: str) -> None:
    # packaging's Version strips white space, so "3.12\n" would otherwise reach the header and uv's arguments.
    with pytest.raises(UsageError, match=f"--{field} .* is not a version number"):
        LockSpec(**{"tf": "2.21", field: value})


@pytest.mark.parametrize("spec, message", [
    (LockSpec(tf="2.17", python="3.13"), "TensorFlow 2.17 has no wheels for Python 3.13: it supports Python 3.9-3.12"),
    (LockSpec(tf="2.21", python="3.9"), "supports Python 3.10-3.13"),
    (LockSpec(tf="2.21", glibc="2.17"), "wheels need glibc >= 2.27, but the target has glibc 2.17"),
    (LockSpec(tf="2.13", flavour="gpu"), "no \\[and-cuda\\] extra"),
    (LockSpec(tf="1.15"), "no build data for TensorFlow"),
    (LockSpec(tf="2.21", platform="windows-x86_64"), "unsupported --platform"),
    (LockSpec(tf="2.21", glibc="2.30"), "unsupported --glibc"),
])
def test_impossible_combinations_are_refused_with_the_reason(spec: LockSpec, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        locking.resolve(spec, uv="/nonexistent/uv")


def test_possible_combinations_pass_the_checks() -> None:
    assert locking.check_target(LockSpec(tf="2.21", python="3.13")).version == "2.21"
    assert locking.check_target(LockSpec(tf="2.20", python="3.9", glibc="2.17")).version == "2.20"
    assert locking.check_target(LockSpec(tf="2.13", flavour="cpu", python="3.8", glibc="2.17")).version == "2.13"


def test_top_level_requirements() -> None:
    assert locking.top_level_requirements(LockSpec(tf="2.21")) == ["tensorflow[and-cuda]==2.21.*", "tf-keras==2.21.*",
                                                                   "tensorboard"]
    # One TensorFlow distribution: tf-keras requires `tensorflow`, so a CPU lock pins it rather than tensorflow-cpu.
    assert locking.top_level_requirements(LockSpec(tf="2.21.0", flavour="cpu")) == ["tensorflow==2.21.0",
                                                                                   "tf-keras==2.21.*", "tensorboard"]
    # Before 2.16 Keras 2 is TensorFlow's own tf.keras: no tf-keras package, so the smaller CPU build fits alone.
    assert locking.top_level_requirements(LockSpec(tf="2.15", flavour="gpu")) == ["tensorflow[and-cuda]==2.15.*",
                                                                                  "tensorboard"]
    assert locking.top_level_requirements(LockSpec(tf="2.15", flavour="cpu")) == ["tensorflow-cpu==2.15.*",
                                                                                  "tensorboard"]


def test_tfdist_itself_comes_from_the_index_or_a_local_wheel(tmp_path: Path) -> None:
    from tfdist import __version__

    assert locking.self_requirement(LockSpec(tf="2.21")) == f"tfdist=={__version__}"
    assert locking.self_requirement(LockSpec(tf="2.21", include_tfdist=False)) is None
    wheel = tmp_path / "tfdist-9.9-py3-none-any.whl"
    assert locking.self_requirement(LockSpec(tf="2.21", tfdist_wheel=wheel)) == f"tfdist @ {wheel.as_uri()}"
    body = f"tfdist @ {wheel.as_uri()} \\\n    --hash=sha256:{'c' * 64}\n"
    local = locking.local_wheel_line(body, wheel)
    assert local == f"./tfdist-9.9-py3-none-any.whl \\\n    --hash=sha256:{'c' * 64}\n"
    assert locking.pins(local) == {"tfdist": "9.9"}


def test_an_unpublished_tfdist_asks_for_the_wheel() -> None:
    stderr = ("error: No solution found when resolving dependencies\n  cause: Because tfdist was not found in the "
              "package registry and you require tfdist==0.1.0, we can conclude ...\n")
    with pytest.raises(TfdistError, match="not on the package index") as caught:
        locking.resolve(LockSpec(tf="2.21"), uv="uv", runner=FakeUv(returncode=1, stdout="", stderr=stderr))
    assert "--tfdist-wheel dist/tfdist-" in caught.value.hint


def test_extra_requirements_are_read_and_options_refused(tmp_path: Path) -> None:
    good = tmp_path / "extra.txt"
    good.write_text("# data\npandas>=2  # tables\n\nscikit-learn==1.5.*\n")
    assert locking.read_extra_requirements([good]) == ["pandas>=2", "scikit-learn==1.5.*"]
    bad = tmp_path / "bad.txt"
    bad.write_text("numpy\n--index-url https://elsewhere/simple\n")
    with pytest.raises(UsageError, match="bad.txt:2: option line '--index-url'"):
        locking.read_extra_requirements([bad])
    with pytest.raises(UsageError, match="cannot read"):
        locking.read_extra_requirements([tmp_path / "missing.txt"])


class FakeUv:
    """Stands in for subprocess.run: records the call and the requirements.in uv would read."""

    def __init__(self, returncode: int = 0, stdout: str = UV_OUTPUT, stderr: str = "") -> None:
        self.result = (returncode, stdout, stderr)
        self.argv: list[str] = []
        self.requirements_in = ""
        self.kwargs: dict[str, Any] = {}

    def __call__(self, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.argv, self.kwargs = argv, kwargs
        self.requirements_in = (Path(kwargs["cwd"]) / "requirements.in").read_text()
        code, out, err = self.result
        return subprocess.CompletedProcess(argv, code, out, err)


def test_resolver_call_targets_the_spec_and_uses_the_mirror(tmp_path: Path) -> None:
    extra = tmp_path / "extra.txt"
    extra.write_text("pandas\n")
    uv = FakeUv()
    spec = LockSpec(tf="2.21", python="3.12", glibc="2.35", mirror_index=MIRROR, extra_requirements=(extra,))
    result = locking.resolve(spec, uv="/opt/uv", runner=uv)
    assert uv.argv[:4] == ["/opt/uv", "pip", "compile", "requirements.in"]
    joined = " ".join(uv.argv)
    for fragment in ("--python-version 3.12", "--python-platform x86_64-manylinux_2_35", "--generate-hashes",
                     "--no-header", f"--default-index {MIRROR}", f"--python {sys.executable}",
                     "--no-python-downloads"):
        assert fragment in joined
    from tfdist import __version__

    assert uv.requirements_in == f"tensorflow[and-cuda]==2.21.*\ntf-keras==2.21.*\ntensorboard\npandas\ntfdist=={__version__}\n"
    # The mirror is used to resolve, but nothing in the lock names it.
    assert "mirror.example.cn" not in result.text
    assert "--index-url" not in result.text and "# from" not in result.text
    assert result.pins == {"absl-py": "2.5.1", "tensorflow": "2.21.0", "tf-keras": "2.21.0"}
    assert locking.parse_header(result.text) == locking.LockInfo("2.21", "gpu", "3.12", "linux-x86_64", "2.35")


def test_no_mirror_means_uv_keeps_its_own_index_configuration() -> None:
    uv = FakeUv(stdout=UV_OUTPUT.replace(f"--index-url {MIRROR}\n", "").replace(f"    # from {MIRROR}\n", ""))
    locking.resolve(LockSpec(tf="2.21", flavour="cpu"), uv="uv", runner=uv)
    assert not any("index" in word for word in uv.argv)


def test_a_mirror_that_survives_scrubbing_stops_the_lock() -> None:
    leaky = UV_OUTPUT + f"# see {MIRROR}/absl-py\n"
    with pytest.raises(TfdistError, match="wrote the mirror mirror.example.cn into the lock"):
        locking.resolve(LockSpec(tf="2.21", mirror_index=MIRROR), uv="uv", runner=FakeUv(stdout=leaky))


def test_resolver_failure_is_reported_with_uv_message() -> None:
    stderr = "\x1b[1m\x1b[31merror\x1b[0m: No solution found when resolving dependencies:\n  ╰─▶ Because there is no version of tensorflow-cpu==2.21.* ...\nhint: check\n"
    with pytest.raises(TfdistError, match="No solution found") as caught:
        locking.resolve(LockSpec(tf="2.21", flavour="cpu"), uv="uv", runner=FakeUv(returncode=1, stdout="", stderr=stderr))
    assert "\x1b" not in caught.value.message and "hint: check" not in caught.value.message


def test_golden_header_and_conda_file() -> None:
    spec = LockSpec(tf="2.21", flavour="cpu", python="3.11")
    text = locking.resolve(spec, uv="uv", runner=FakeUv())
    check_golden("requirements-cpu-tf2.21-py3.11.lock", text.text)
    conda = locking.render_conda(text.text, locking.parse_header(text.text))
    check_golden("environment-cpu-tf2.21-py3.11.yml", conda)
    document = yaml.safe_load(conda)
    assert document["dependencies"][:2] == ["python=3.11", "pip"]
    pip_section = document["dependencies"][2]["pip"]
    assert pip_section[0] == f"absl-py==2.5.1 --hash=sha256:{HASH_A} --hash=sha256:{HASH_B}"
    assert [entry.split("==")[0] for entry in pip_section] == ["absl-py", "tensorflow", "tf-keras"]


def test_header_without_mark_is_refused() -> None:
    with pytest.raises(UsageError, match="no tfdist header"):
        locking.parse_header("six==1.0\n")
