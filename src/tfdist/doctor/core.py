"""Run the doctor: probe, check, decide the verdict, and optionally recommend and verify."""

from __future__ import annotations

from dataclasses import field

from tfdist.doctor.checks import run_checks
from tfdist.doctor.context import Context, build_context
from tfdist.doctor.facts import Facts
from tfdist.doctor.findings import ERROR, Finding, Verdict, exit_status_for, sort_findings
from tfdist.doctor.pipconf import configured_index_url
from tfdist.doctor.probe_conda import probe_conda
from tfdist.doctor.probe_libs import probe_libraries
from tfdist.doctor.probe_nvidia import probe_driver
from tfdist.doctor.probe_packages import probe_tensorflow
from tfdist.doctor.probe_system import probe_system
from tfdist.doctor.probe_xla import probe_xla
from tfdist.doctor.recommend import Recommendation, recommend
from tfdist.doctor.roots import ProbeRoots
from tfdist.frozen import frozen


@frozen
class DoctorConfig:
    """What to run.

    Attributes:
        roots: the machine to inspect (the real one by default).
        expect_gpu: treat "no usable GPU" as a problem (exit 1) instead of information.
        recommend: add the newest TensorFlow this machine can run and its install command.
        verify: import TensorFlow in a subprocess afterwards, run an op on each GPU and compile one small XLA
            function on GPU:0 (reported next to the static XLA checks' prediction).
        verify_timeout_s: limit for that subprocess.
    """

    roots: ProbeRoots = field(default_factory=ProbeRoots)
    expect_gpu: bool = False
    recommend: bool = False
    verify: bool = False
    verify_timeout_s: float = 180.0


@frozen
class Report:
    """The doctor's result."""

    facts: Facts
    findings: tuple[Finding, ...]
    verdict: Verdict
    recommendation: Recommendation | None = None
    verification: object | None = None  # tfdist.doctor.verify.Verification


def collect_facts(roots: ProbeRoots) -> Facts:
    """Run every probe; nothing here imports TensorFlow."""
    tensorflow = probe_tensorflow(roots)
    conda = probe_conda(roots)
    libraries = probe_libraries(roots, tensorflow.nvidia_wheels, conda)
    return Facts(
        system=probe_system(roots, roots.python_executable),
        driver=probe_driver(roots, libraries),
        libraries=libraries,
        tensorflow=tensorflow,
        conda=conda,
        xla=probe_xla(roots, tensorflow, conda),
    )


def decide(ctx: Context, findings: list[Finding]) -> Verdict:
    """The verdict: errors mean problems (exit 1); otherwise say where TensorFlow will run (exit 0)."""
    status = exit_status_for(findings)
    version = ctx.tf_version
    gpus = ctx.facts.driver.gpus
    if any(f.severity == ERROR for f in findings):
        first = next(f for f in findings if f.severity == ERROR)
        count = sum(1 for f in findings if f.severity == ERROR)
        more = f" (and {count - 1} more problem{'s' if count > 2 else ''})" if count > 1 else ""
        return Verdict("problems", f"{first.title}{more}", status)
    if not ctx.tf_installed:
        return Verdict("no-tensorflow", "TensorFlow is not installed; nothing stops it from running here", status)
    if ctx.cuda_build and ctx.driver_ok and ctx.linux:
        names = ", ".join(sorted({g.name for g in gpus}))
        through = " through WSL2 and the Windows driver" if ctx.facts.system.wsl else ""
        return Verdict(
            "gpu-ready",
            f"TensorFlow {version} should use {len(gpus)} GPU{'s' if len(gpus) > 1 else ''} ({names}){through}",
            status,
        )
    reason = "this machine has no NVIDIA GPU" if not ctx.gpu_present else "no usable GPU for this build"
    return Verdict("cpu-only", f"TensorFlow {version} will run on the CPU: {reason}", status)


def run_doctor(config: DoctorConfig) -> Report:
    """Probe the machine, run the checks and assemble the report."""
    facts = collect_facts(config.roots)
    ctx = build_context(facts, expect_gpu=config.expect_gpu)
    findings = sort_findings(run_checks(ctx))
    rec = None
    if config.recommend:
        index_url, _ = configured_index_url(config.roots)
        rec = recommend(facts, index_url, expect_gpu=config.expect_gpu)
    verification = None
    if config.verify and ctx.tf_installed:
        from tfdist.doctor.verify import run_verification  # imports subprocess machinery only when asked

        verification = run_verification(
            config.roots.python_executable,
            env=dict(config.roots.env),
            timeout_s=config.verify_timeout_s,
            gpu_expected=ctx.gpu_wanted,
            xla_prediction=tuple(f"{f.severity} {f.id}: {f.title}" for f in findings if f.id.startswith("xla-")),
        )
        findings = sort_findings(findings + list(verification.findings))
    verdict = decide(ctx, findings)
    if verification is not None and verification.ok and verdict.status != "problems":
        gpus = len(verification.gpus)
        if gpus:
            verdict = Verdict(
                "gpu-ready", f"TensorFlow ran an op on {gpus} GPU{'s' if gpus > 1 else ''}", verdict.exit_status
            )
    return Report(facts, tuple(findings), verdict, rec, verification)
