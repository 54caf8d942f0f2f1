"""``tfdist doctor``: whether TensorFlow will use the GPU, why not, and the fix (without importing TensorFlow)."""

from __future__ import annotations

import click

from tfdist.cli.common import emit_json, option


@click.command("doctor")
@option("--json", "as_json", is_flag=True, help="Print a versioned JSON document instead of the report.")
@option(
    "--recommend", is_flag=True, help="Also name the newest TensorFlow this machine can run and its install command."
)
@option(
    "--verify",
    is_flag=True,
    help="Finally import TensorFlow in a child process, run an op on each GPU, compile one XLA function on GPU:0 "
    "and explain its log lines (slow).",
)
@option(
    "--expect-gpu",
    is_flag=True,
    help="A missing or unusable GPU is a problem (exit 1). Without it, a machine with no GPU is healthy on the CPU.",
)
@option(
    "--verify-timeout",
    type=click.FloatRange(min=1),
    default=180.0,
    show_default=True,
    help="Seconds allowed for --verify.",
)
def command(as_json: bool, recommend: bool, verify: bool, expect_gpu: bool, verify_timeout: float) -> int:
    """Say whether TensorFlow will use the GPU, why not, and the exact fix.

    Probes the OS, Python, NVIDIA driver (NVML, then nvidia-smi, then /proc), CUDA libraries, XLA's libdevice and
    ptxas, and the installed TensorFlow build without importing TensorFlow. Exit status: 0 healthy (including a machine without a GPU
    that runs TensorFlow on the CPU), 1 problems found, 2 bad usage.
    """
    from tfdist.doctor import roots
    from tfdist.doctor.core import DoctorConfig, run_doctor

    report = run_doctor(
        DoctorConfig(
            roots=roots.machine_roots(),
            expect_gpu=expect_gpu,
            recommend=recommend,
            verify=verify,
            verify_timeout_s=verify_timeout,
        )
    )
    if as_json:
        from tfdist.doctor.report import to_json

        emit_json("doctor", to_json(report))
    else:
        from tfdist.doctor.report import render

        render(report)
    return report.verdict.exit_status
