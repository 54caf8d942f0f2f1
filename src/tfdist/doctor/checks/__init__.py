"""The checks: each reads the :class:`~tfdist.doctor.context.Context` and returns findings with evidence and
the exact fix. The causes and their messages come from compat-data.md section C."""

from __future__ import annotations

from typing import Callable

from tfdist.doctor.checks.conda import check_conda
from tfdist.doctor.checks.driver import check_driver, check_visible_devices
from tfdist.doctor.checks.wsl import check_wsl
from tfdist.doctor.checks.gpu import check_architecture, check_libraries
from tfdist.doctor.checks.xla import check_xla
from tfdist.doctor.checks.install import check_installation, check_keras, check_platform, check_python_glibc
from tfdist.doctor.context import Context
from tfdist.doctor.findings import Finding

Check = Callable[[Context], list[Finding]]

ALL_CHECKS: tuple[Check, ...] = (
    check_platform,
    check_installation,
    check_python_glibc,
    check_wsl,
    check_driver,
    check_visible_devices,
    check_architecture,
    check_libraries,
    check_xla,
    check_conda,
    check_keras,
)


def run_checks(ctx: Context) -> list[Finding]:
    """Every check, in order."""
    findings: list[Finding] = []
    for check in ALL_CHECKS:
        findings += check(ctx)
    return findings
