"""WSL2 (cause 13): the GPU driver is the Windows one. WSL2 shares its ``libcuda.so.1`` and ``nvidia-smi`` in
``/usr/lib/wsl/lib`` and lists that folder in ``/etc/ld.so.conf.d/ld.wsl.conf``; a Linux NVIDIA driver must never be
installed inside the distribution. Every fix here is in those terms (NVIDIA's CUDA on WSL User Guide)."""

from __future__ import annotations

from tfdist.compat import tables as compat
from tfdist.doctor.context import Context
from tfdist.doctor.findings import ERROR, INFO, Finding

WSL_LIB = "/usr/lib/wsl/lib"
WSL_DRIVER_UPDATE = "update the NVIDIA driver on Windows (the GeForce/RTX driver installer), then run: wsl --shutdown"
_NEVER_LINUX_DRIVER = (
    "Never install a Linux NVIDIA driver inside WSL2: the Windows driver is the driver, shared into the "
    "distribution through /usr/lib/wsl/lib."
)


def _is_wsl1(ctx: Context) -> bool:
    kernel = (ctx.facts.system.kernel or "").lower()
    return kernel.endswith("-microsoft") and "wsl2" not in kernel and "microsoft-standard" not in kernel


def check_wsl(ctx: Context) -> list[Finding]:
    """The WSL2 rules: a Linux driver inside, no Windows driver share, or its libcuda off the loader path."""
    system, driver = ctx.facts.system, ctx.facts.driver
    if not (ctx.linux and system.wsl):
        return []
    said = tuple(f"WSL: {e}" for e in system.wsl_evidence)
    if _is_wsl1(ctx):
        return [
            Finding(
                "wsl1-no-gpu",
                ERROR if ctx.gpu_wanted or ctx.expect_gpu else INFO,
                "This is WSL 1, which has no GPU support: CUDA needs WSL 2",
                said + (f"kernel release {system.kernel}",),
                fix="wsl --set-version <distribution> 2  # in Windows PowerShell; see: wsl --list --verbose",
            )
        ]
    libs = ctx.facts.libraries.libraries
    findings = []
    share = [lib for lib in libs if lib.name == "libcuda.so.1" and f"{WSL_LIB}/" in lib.path]
    linux_cuda = [
        lib
        for lib in libs
        if lib.name.startswith("libcuda.so") and lib.origin == "ld-cache" and "/usr/lib/wsl/" not in lib.path
    ]
    if linux_cuda:
        findings.append(
            Finding(
                "wsl-linux-driver-installed",
                ERROR,
                "A Linux NVIDIA driver is installed inside WSL2 and shadows the Windows driver's libcuda",
                said + tuple(f"{lib.name}: {lib.path} ({lib.owner or 'Linux driver'})" for lib in linux_cuda),
                fix="sudo apt-get remove --purge '^nvidia-driver-.*' '^libnvidia-.*'",
                alternatives=("sudo ldconfig  # afterwards, so the loader cache forgets the removed copies",),
                detail=_NEVER_LINUX_DRIVER + " For the CUDA toolkit inside WSL2 use NVIDIA's WSL-Ubuntu "
                "packages (cuda-toolkit-12-x), never the 'cuda' or 'cuda-drivers' meta-packages, which pull a driver.",
            )
        )
    dxg = ctx.facts.driver.dev_nodes
    if not share and (ctx.expect_gpu or dxg or driver.state != "absent"):
        findings.append(
            Finding(
                "wsl-no-windows-driver",
                ERROR,
                "WSL2 has no GPU driver from Windows: /usr/lib/wsl/lib/libcuda.so.1 is missing",
                said
                + (
                    f"{WSL_LIB}/libcuda.so.1: absent",
                    f"/dev/dxg: {'present' if dxg else 'absent (no GPU paravirtualization)'}",
                ),
                fix=WSL_DRIVER_UPDATE,
                alternatives=("wsl --update  # in Windows PowerShell: a current WSL kernel",),
                detail=f"Install a current NVIDIA driver on Windows (>= {compat.wsl_windows_driver_min()} for "
                "CUDA 12), update WSL and restart it. " + _NEVER_LINUX_DRIVER,
            )
        )
    if share and driver.state not in ("ok", "absent"):
        findings.append(
            Finding(
                "wsl-driver-not-answering",
                ERROR,
                "WSL2: the Windows driver is shared into WSL but does not answer",
                said
                + (
                    f"nvidia-smi: {driver.nvidia_smi or WSL_LIB + '/nvidia-smi'}"
                    + (f" ({driver.nvidia_smi_error})" if driver.nvidia_smi_error else ""),
                    f"NVML: {driver.nvml_error or 'no answer'}",
                    f"driver state: {driver.state}",
                ),
                fix=WSL_DRIVER_UPDATE,
                alternatives=("wsl --shutdown  # in Windows PowerShell, then open the distribution again",),
                detail="Inside WSL2 the GPU is reached through the Windows driver; a driver update or reinstall on "
                "Windows, then restarting WSL, is the fix. " + _NEVER_LINUX_DRIVER,
            )
        )
    if share and "libcuda.so.1" not in ctx.loader and (ctx.gpu_wanted or dxg):
        findings.append(_share_off_loader_path(ctx, said, share[0].path))
    return findings


def _share_off_loader_path(ctx: Context, said: tuple[str, ...], path: str) -> Finding:
    conf = ctx.facts.system.wsl_loader_conf
    if conf:
        fix = "sudo ldconfig"
        why = f"{conf} lists {WSL_LIB} but the loader cache was not rebuilt"
    else:
        fix = f"echo {WSL_LIB} | sudo tee /etc/ld.so.conf.d/ld.wsl.conf && sudo ldconfig"
        why = f"no file in /etc/ld.so.conf.d lists {WSL_LIB} (WSL writes ld.wsl.conf; this distribution has none)"
    return Finding(
        "wsl-libcuda-not-on-loader-path",
        ERROR,
        "WSL2: the Windows driver's libcuda.so.1 is not on the loader path, so TensorFlow cannot load it",
        said + (f"libcuda.so.1: {path} (Windows NVIDIA driver share)", why, "ldconfig cache: no libcuda.so.1"),
        fix=fix,
        alternatives=(
            f"export LD_LIBRARY_PATH={WSL_LIB}${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}",
            "wsl --shutdown  # in Windows: WSL rewrites ld.wsl.conf when it starts",
        ),
        detail="TensorFlow logs 'Could not load dynamic library libcuda.so.1'. ldconfig may warn "
        f"'{WSL_LIB}/libcuda.so.1 is not a symbolic link': harmless (microsoft/WSL#5548). " + _NEVER_LINUX_DRIVER,
    )
