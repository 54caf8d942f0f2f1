"""The finding type and the verdict: what the checks produce and how they become an exit status."""

from __future__ import annotations

from tfdist.frozen import frozen
from tfdist.status import ExitStatus

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


@frozen
class Finding:
    """One diagnosis.

    Attributes:
        id: stable kebab-case identifier (``driver-too-old``), used in ``--json`` and tests.
        severity: ``error`` (TensorFlow will not use the GPU, or will not run), ``warning`` (it will, with a
            known problem), ``info`` (worth knowing; nothing to fix).
        title: one line saying what is wrong.
        evidence: the facts it rests on, each naming its source (file, command, variable).
        fix: the exact command to run, when there is one.
        alternatives: other commands that also fix it.
        detail: why, in a sentence or two.
    """

    id: str
    severity: str
    title: str
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    alternatives: tuple[str, ...] = ()
    detail: str | None = None


@frozen
class Verdict:
    """The one-line answer and the exit status.

    ``status`` is ``gpu-ready``, ``cpu-only`` (TensorFlow runs on the CPU and no GPU was asked for),
    ``no-tensorflow`` or ``problems``. Only ``problems`` (at least one error finding) exits with 1.
    """

    status: str
    summary: str
    exit_status: int


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Errors first, then warnings, then information; stable within a severity."""
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 3))


def exit_status_for(findings: list[Finding]) -> int:
    """1 when any finding is an error, else 0."""
    return int(ExitStatus.ERROR) if any(f.severity == ERROR for f in findings) else int(ExitStatus.SUCCESS)
