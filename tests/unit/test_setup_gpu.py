"""setup-gpu: driver-branch choice from the compat data, refusals, and the pinned script text."""
from __future__ import annotations

import functools


import pytest

from tfdist.deploy.setup_gpu import SetupGpuSpec, choose_driver, render_script, supported_systems
from tfdist.errors import UsageError
from tests import goldens


check_golden = functools.partial(goldens.check_golden, "setup_gpu")


@pytest.mark.parametrize("tf, branch, floor, recommended", [
    ("2.21", 570, "525.60.13", "555.42.06"),   # CUDA 12.5.1: 555 is a short-lived branch, so 570
    ("2.16", 550, "525.60.13", "545.23.06"),   # CUDA 12.3
    ("2.15", 535, "525.60.13", "535.54.03"),   # CUDA 12.2
    ("2.14", 535, "450.80.02", "520.61.05"),   # CUDA 11.8: the oldest listed branch already covers it
])
def test_default_branch_is_the_oldest_long_lived_one_at_or_above_the_cuda_driver(
        tf: str, branch: int, floor: str, recommended: str) -> None:
    choice = choose_driver(tf)
    assert (choice.branch, choice.package) == (branch, f"cuda-drivers-{branch}")
    assert (choice.floor, choice.recommended) == (floor, recommended)
    assert choice.warning is None


def test_user_branch_between_floor_and_recommended_is_allowed_with_a_warning() -> None:
    choice = choose_driver("2.21", 550)
    assert choice.branch == 550
    assert choice.warning and "minor-version compatibility" in choice.warning


def test_user_branch_at_or_above_recommended_has_no_warning() -> None:
    assert choose_driver("2.21", 580).warning is None


def test_user_branch_below_the_floor_is_refused() -> None:
    with pytest.raises(UsageError, match="cannot run TF 2.21") as caught:
        choose_driver("2.21", 520)
    assert caught.value.hint and "570" in caught.value.hint


def test_unknown_tf_and_unsupported_os_are_refused() -> None:
    with pytest.raises(UsageError):
        choose_driver("1.15")
    with pytest.raises(UsageError, match="unsupported --os"):
        render_script(SetupGpuSpec(os="centos7"))


def test_script_uses_the_keyring_package_never_apt_key() -> None:
    for os_name in supported_systems():
        text, _ = render_script(SetupGpuSpec(os=os_name))
        assert text.startswith("#!/usr/bin/env bash\n")
        assert "set -euo pipefail" in text
        assert "cuda-keyring_1.1-1_all.deb" in text
        assert "apt-key" not in text.replace("no apt-key", "")
        assert "cuda-toolkit" not in text and "cudnn" not in text.lower().replace("cudnn user-space", "")


@pytest.mark.parametrize("os_name, tf, driver", [("ubuntu22.04", "2.21", None), ("ubuntu24.04", "2.21", 580),
                                                 ("debian12", "2.15", None)])
def test_golden_scripts(os_name: str, tf: str, driver: int | None) -> None:
    text, _ = render_script(SetupGpuSpec(os=os_name, tf=tf, driver=driver))
    check_golden(f"{os_name}-tf{tf}-driver{driver or 'auto'}.sh", text)
