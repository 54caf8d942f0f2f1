"""Output: the ``--json`` document and the human report (grouped, coloured on a terminal, plain when piped so
it can be pasted into an issue). rich is imported only for the human report."""

from __future__ import annotations

import dataclasses
from typing import Any

from tfdist.doctor.core import Report
from tfdist.doctor.findings import ERROR, INFO, WARNING

_STYLE = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan"}
_REACH = {"ld-cache": "ldconfig cache", "cuda-toolkit": "toolkit", "wsl": "WSL2 driver share", "conda": "conda lib"}
_VERDICT_STYLE = {"problems": "bold red", "gpu-ready": "bold green", "cpu-only": "bold", "no-tensorflow": "bold"}


def to_json(report: Report) -> dict[str, Any]:
    """The payload of ``tfdist doctor --json`` (wrapped by :func:`tfdist.cli.common.emit_json`)."""
    return {
        "verdict": report.verdict.status,
        "summary": report.verdict.summary,
        "exit_status": report.verdict.exit_status,
        "findings": [dataclasses.asdict(f) for f in report.findings],
        "facts": dataclasses.asdict(report.facts),
        "recommendation": dataclasses.asdict(report.recommendation) if report.recommendation else None,
        "verification": dataclasses.asdict(report.verification) if report.verification else None,  # type: ignore[call-overload]
    }


def _relevant_libraries(report: Report) -> list[Any]:
    libs = report.facts.libraries.libraries
    # Soname entries only (libcudnn.so.9, libcudart.so.10.1), not the development links (libcudnn.so) or the
    # fully versioned files behind them (libcudnn.so.9.1.0).
    return [
        lib
        for lib in libs
        if lib.name.count(".so.") == 1
        and lib.name.split(".so.")[1].count(".") <= 1
        and not (lib.name.startswith(("libcuda.so.", "libnvidia-ml.so.")) and lib.name.split(".so.")[1] != "1")
    ]


def render(report: Report, *, console: Any = None) -> None:
    """Print the human report."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich import box

    out = console or Console(highlight=False, soft_wrap=True)
    facts = report.facts
    system, driver, tf = facts.system, facts.driver, facts.tensorflow
    verdict_style = _VERDICT_STYLE.get(report.verdict.status, "bold")
    out.print(f"[{verdict_style}]{escape(report.verdict.summary)}[/]  (verdict: {report.verdict.status})")

    out.print("\n[bold]System[/]")
    where = [
        system.os_name or system.platform,
        f"kernel {system.kernel}" if system.kernel else None,
        f"glibc {system.glibc}" if system.glibc else None,
        f"WSL2 ({'; '.join(system.wsl_evidence)})" if system.wsl else None,
        f"in {system.container} container" if system.container else None,
    ]
    out.print("  " + escape(", ".join(w for w in where if w)))
    env = f"{system.environment} {system.environment_prefix}" if system.environment_prefix else system.environment
    if system.wsl:
        conf = system.wsl_loader_conf
        out.print(
            "  /usr/lib/wsl/lib (the Windows driver's libcuda) "
            + (f"is on the loader path via {conf}" if conf else "is in no ld.so.conf.d file")
        )
    out.print(f"  Python {system.python_version} ({escape(system.python_executable)}, {escape(env)})")

    out.print("\n[bold]NVIDIA driver[/]")
    if driver.driver_version:
        out.print(
            f"  {'Windows driver (WSL2)' if system.wsl else 'driver'} {driver.driver_version} via {driver.source}, "
            f"supports CUDA up to {driver.cuda_driver_version or '?'}"
            + (f", kernel module {driver.kernel_module_version}" if driver.kernel_module_version else "")
        )
    else:
        out.print(f"  none found (state: {driver.state})")
    if driver.gpus:
        table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
        for column in ("GPU", "name", "compute capability", "memory"):
            table.add_column(column, overflow="fold")
        for gpu in driver.gpus:
            table.add_row(
                str(gpu.index),
                escape(gpu.name),
                f"{gpu.compute_capability or '?'}",
                f"{gpu.memory_mib} MiB" if gpu.memory_mib else "?",
            )
        out.print(table)

    out.print("\n[bold]TensorFlow[/]")
    if tf.dists:
        out.print(
            "  "
            + escape(", ".join(f"{d.name} {d.version}" for d in tf.dists))
            + (f" (files from {tf.files_owner})" if len(tf.dists) > 1 and tf.files_owner else "")
        )
    else:
        out.print("  not installed")
    if tf.build_info:
        info = tf.build_info
        out.print(
            f"  build: CUDA build {info.get('is_cuda_build')}, CUDA {info.get('cuda_version', '-')}, "
            f"cuDNN {info.get('cudnn_version', '-')}, "
            f"{', '.join(info.get('cuda_compute_capabilities', []) or []) or 'no compute capabilities'}"  # type: ignore[arg-type]
            f" (from {tf.build_info_path})"
        )
    extras = [
        f"keras {tf.keras}" if tf.keras else None,
        f"tf-keras {tf.tf_keras}" if tf.tf_keras else None,
        f"torch {tf.torch}" if tf.torch else None,
    ]
    if any(extras):
        out.print("  " + ", ".join(e for e in extras if e))
    if tf.nvidia_wheels:
        out.print("  " + escape(", ".join(f"{n} {v}" for n, v in tf.nvidia_wheels.items())))

    libs = _relevant_libraries(report)
    if libs:
        # Plain lines, not a table: a table cuts long paths mid-name on a narrow terminal, and these are paths the
        # user may have to act on. The terminal wraps them instead.
        out.print("\n[bold]CUDA libraries[/] (name, version, how the loader finds it, owner, path)")
        width = max(len(lib.name) for lib in libs)
        # A version that is only the SONAME's number (a file named libcudnn.so.9 and nothing more) says so.
        versions = [
            (lib.version or "") + (" (soname)" if (lib.version or "") == lib.name.partition(".so.")[2] else "")
            for lib in libs
        ]
        vwidth = max(len(v) for v in versions)
        for lib, version in zip(libs, versions):
            owner = f", {lib.owner}" if lib.owner else ""
            if lib.origin.startswith("pip"):
                reach, owner = "site-packages", f", {lib.owner or 'pip wheel'}"
            elif lib.on_loader_path:
                reach = _REACH.get(lib.origin, lib.origin)
            else:
                reach = "not on the loader path"
            out.print(
                f"  {escape(lib.name.ljust(width))}  {escape(version.ljust(vwidth))}  "
                f"[dim]{escape(reach + owner)}[/]  {escape(lib.path)}"
            )
    _render_conda(out, report, escape)
    _render_xla(out, report, escape)

    out.print("\n[bold]Findings[/]")
    if not report.findings:
        out.print("  none")
    for finding in report.findings:
        style = _STYLE.get(finding.severity, "")
        out.print(f"  [{style}]{finding.severity.upper():7}[/] {escape(finding.title)}  [dim]({finding.id})[/]")
        for item in finding.evidence:
            out.print(f"           - {escape(item)}")
        if finding.detail:
            out.print(f"           {escape(finding.detail)}")
        if finding.fix:
            out.print(f"           fix: [bold]{escape(finding.fix)}[/]")
        for other in finding.alternatives:
            out.print(f"           or:  {escape(other)}")

    rec = report.recommendation
    if rec is not None:
        out.print("\n[bold]Recommendation[/]")
        if rec.version:
            out.print(
                f"  TensorFlow {rec.version} ({'GPU' if rec.gpu else 'CPU'}): [bold]{escape(rec.command or '')}[/]"
            )
        else:
            out.print("  no official TensorFlow release fits this machine")
        if rec.mirror_command:
            out.print(f"  with the configured mirror: {escape(rec.mirror_command)}")
        for line in rec.skipped[:5]:
            out.print(f"  [dim]not {escape(line)}[/]")
        for note in rec.notes:
            out.print(f"  note: {escape(note)}")

    verification = report.verification
    if verification is not None:
        out.print("\n[bold]Verification[/] (TensorFlow imported in a child process)")
        out.print(
            f"  {'ran' if verification.ok else 'failed'} in {verification.duration_s} s: TensorFlow "  # type: ignore[attr-defined]
            f"{verification.version or '?'}, GPUs {list(verification.gpus)}, CPU op ok: {verification.cpu_op}"
        )  # type: ignore[attr-defined]
        xla = verification.xla  # type: ignore[attr-defined]
        if xla is not None:
            if not xla.get("ran"):
                result = f"not run: {xla.get('reason', '?')}"
            else:
                result = "compiled and ran" if xla.get("ok") else f"FAILED: {xla.get('error', '?')}"
            out.print(f"  XLA (jit_compile=True on GPU:0): {escape(result)}")
            predicted = verification.xla_prediction or ("no XLA problem",)  # type: ignore[attr-defined]
            out.print(f"  doctor's prediction: {escape('; '.join(predicted))}")
        for match in verification.matches:  # type: ignore[attr-defined]
            out.print(f"  [dim]log ({match.cause}): {escape(match.line)}[/]")


def _render_xla(out: Any, report: Report, escape: Any) -> None:
    xla = report.facts.xla
    if not xla.probed:
        return
    out.print("\n[bold]XLA toolchain[/] (where XLA looks, in its order)")
    if xla.xla_flags is not None:
        out.print(f"  XLA_FLAGS={escape(xla.xla_flags)}")
    for root in xla.roots:
        state = "libdevice.10.bc" if root.libdevice else ("empty nvvm/libdevice" if root.libdevice_dir else "-")
        mark = "*" if root.path == xla.libdevice_root else " "
        out.print(f"  {mark} {escape(root.path)}  [dim]{escape(root.label)}: {state}[/]")
    for root in xla.elsewhere:
        what = ", ".join(w for w, has in (("libdevice", root.libdevice), ("ptxas", root.ptxas)) if has)
        out.print(f"    [dim]not searched, has {what}:[/] {escape(root.path)} [dim]({escape(root.label)})[/]")
    ptxas = xla.ptxas
    if ptxas is not None and ptxas.path:
        version = ptxas.version or f"version unknown: {ptxas.error}"
        out.print(f"  ptxas {escape(version)} at {escape(ptxas.path)} [dim](found by {escape(ptxas.found_by)})[/]")
    else:
        out.print("  ptxas: none XLA would use")
    if xla.nvcc_packages:
        out.print("  " + escape(", ".join(xla.nvcc_packages)))


def _render_conda(out: Any, report: Report, escape: Any) -> None:
    conda = report.facts.conda
    if conda.prefix is None:
        return
    out.print(f"\n[bold]Conda environment[/] {escape(conda.prefix)}")
    if not conda.packages:
        out.print("  no CUDA, cuDNN or NCCL packages recorded in conda-meta")
    for package in conda.packages:
        channel = f" ({package.channel})" if package.channel else ""
        out.print(f"  {escape(package.name)} {escape(package.version)} {escape(package.build)}{escape(channel)}")
    for script in conda.activation_scripts:
        state = "applied" if script.applied else "NOT applied in this shell"
        out.print(f"  activation script {escape(script.path)} sets LD_LIBRARY_PATH ({state})")
