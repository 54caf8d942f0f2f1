"""Checks of the NVIDIA driver: absent, not loaded, mismatched, too old, hidden, and the WSL2 rules
(causes 7, 8, 9, 10 and 13)."""

from __future__ import annotations


from tfdist.compat import tables as compat
from tfdist.doctor.context import Context
from tfdist.doctor.findings import ERROR, INFO, WARNING, Finding
from tfdist.doctor.recommend import cc_support, recommend
from tfdist.compat.versions import at_least, vtuple
from tfdist.errors import UsageError


def check_driver(ctx: Context) -> list[Finding]:
    """NVIDIA driver absent, not loaded, mismatched or too old (causes 7, 8, 10)."""
    if not ctx.linux:
        return []
    driver, system = ctx.facts.driver, ctx.facts.system
    findings: list[Finding] = []
    looked = [
        f"NVML: {driver.nvml_error or 'ok'}",
        f"nvidia-smi: {driver.nvidia_smi or 'not on PATH'}"
        + (f" ({driver.nvidia_smi_error})" if driver.nvidia_smi_error else ""),
        f"/proc/driver/nvidia/version: {driver.kernel_module_version or 'absent'}",
    ]
    if driver.state == "absent" and not system.wsl:
        if system.container and not driver.dev_nodes:
            findings.append(
                Finding(
                    "no-gpu-in-container",
                    ERROR if ctx.expect_gpu else INFO,
                    f"No NVIDIA GPU is visible inside this {system.container} container",
                    tuple(looked + ["/dev/nvidia0: absent"]),
                    fix="docker run --gpus all ..."
                    if system.container != "kubernetes"
                    else "set resources.limits nvidia.com/gpu: 1 on the container",
                    alternatives=("install nvidia-container-toolkit on the host",),
                    detail="Containers see GPUs only when started with them "
                    "(docker --gpus, a Kubernetes nvidia.com/gpu limit).",
                )
            )
        else:
            findings.append(
                Finding(
                    "no-nvidia-gpu",
                    ERROR if ctx.expect_gpu else INFO,
                    "No NVIDIA GPU on this machine: TensorFlow will use the CPU",
                    tuple(looked + ["PCI bus: no NVIDIA display or 3D controller"]),
                    fix="tfdist setup-gpu" if ctx.expect_gpu else None,
                )
            )
        return findings
    if driver.state == "not-loaded":
        findings.append(
            Finding(
                "driver-not-loaded",
                ERROR,
                "An NVIDIA GPU is present but its kernel driver is not loaded",
                tuple(looked + [f"PCI devices: {', '.join(driver.pci_devices) or 'none listed'}"]),
                fix="sudo modprobe nvidia",
                alternatives=("tfdist setup-gpu", "mokutil --sb-state"),
                detail="Install the driver if it is missing; after an install, reboot. "
                "With Secure Boot enabled an unsigned "
                "module is refused: enrol its key or disable Secure Boot.",
            )
        )
        return findings
    if driver.state == "error":
        findings.append(
            Finding(
                "driver-query-failed",
                ERROR if ctx.gpu_wanted else WARNING,
                "The NVIDIA driver could not be queried",
                tuple(looked),
                fix=f"{driver.nvidia_smi or 'nvidia-smi'}  # run it and read its message",
                detail="Neither NVML nor nvidia-smi answered; the driver may be broken or half-installed.",
            )
        )
    elif driver.state == "no-devices":
        findings.append(
            Finding(
                "driver-sees-no-gpu",
                ERROR if (ctx.expect_gpu or driver.pci_devices) else WARNING,
                "The NVIDIA driver is loaded but reports no GPU",
                tuple(looked + [f"PCI devices: {', '.join(driver.pci_devices) or 'none'}"]),
                fix="sudo reboot" if driver.pci_devices else None,
                detail="A GPU that fell off the bus (Xid 79) or a container started without GPUs looks like this.",
            )
        )
    user_space = _user_space_driver_versions(ctx)
    module = driver.kernel_module_version
    stale = sorted(v for v in user_space if module and v != module)
    if not system.wsl and (driver.state == "mismatch" or stale):
        findings.append(
            Finding(
                "driver-library-mismatch",
                ERROR,
                "The loaded NVIDIA kernel module and the user-space driver libraries have different versions",
                tuple(looked + [f"user-space driver libraries: {', '.join(sorted(user_space)) or 'unknown'}"]),
                fix="sudo reboot",
                alternatives=("sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia",),
                detail="Typical after a driver upgrade without a reboot: CUDA refuses to start "
                "('kernel version ... does not match DSO version').",
            )
        )
    findings += _driver_age(ctx, looked)
    return findings


def _user_space_driver_versions(ctx: Context) -> set[str]:
    versions = set()
    for lib in ctx.facts.libraries.libraries:
        if (
            lib.origin in ("ld-cache", "LD_LIBRARY_PATH")
            and lib.name.startswith(("libcuda.so", "libnvidia-ml.so"))
            and lib.version
            and vtuple(lib.version)[0] >= 100
        ):
            versions.add(lib.version)
    return versions


def _driver_age(ctx: Context, looked: list[str]) -> list[Finding]:
    driver, system = ctx.facts.driver, ctx.facts.system
    if not (ctx.cuda_build and ctx.cuda and driver.driver_version):
        return []
    try:
        floor = compat.min_driver_for_cuda(ctx.cuda, minor_compat=True, windows=system.wsl)
        toolkit = compat.min_driver_for_cuda(ctx.cuda, windows=system.wsl)
    except UsageError:
        return []
    if system.wsl and vtuple(ctx.cuda)[0] >= 12:
        floor = max(floor, compat.wsl_windows_driver_min(), key=vtuple)
    which = "Windows driver (WSL2)" if system.wsl else "driver"
    evidence = (
        f"NVIDIA {which}: {driver.driver_version} (from {driver.source})",
        f"driver supports CUDA up to: {driver.cuda_driver_version or 'unknown'}",
        f"TensorFlow {ctx.tf_version} was built with CUDA {ctx.cuda}: needs >= {floor}",
    )
    if not at_least(driver.driver_version, floor):
        rec = recommend(ctx.facts)
        older = (rec.command,) if rec.command and rec.gpu else ()
        return [
            Finding(
                "driver-too-old",
                ERROR,
                f"The NVIDIA {which} {driver.driver_version} is too old for CUDA {ctx.cuda}",
                evidence,
                fix="tfdist setup-gpu" if not system.wsl else "update the NVIDIA driver on Windows",
                alternatives=older,
                detail=f"TensorFlow fails with 'CUDA driver version is insufficient for CUDA runtime version'. "
                f"Install a driver >= {toolkit} (or at least {floor}), or an older TensorFlow.",
            )
        ]
    if not at_least(driver.driver_version, toolkit):
        ptx = any(cc_support(g.compute_capability or "", ctx.compiled) == "ptx" for g in driver.gpus)
        return [
            Finding(
                "driver-below-toolkit",
                WARNING if ptx else INFO,
                f"Driver {driver.driver_version} runs CUDA {ctx.cuda} only through minor-version compatibility",
                evidence + (f"CUDA {ctx.cuda} toolkit driver: >= {toolkit}",),
                fix="tfdist setup-gpu" if ptx else None,
                detail="PTX newer than the driver cannot be JIT-compiled under minor-version compatibility"
                + (", and a GPU here needs PTX JIT." if ptx else "; this machine's GPUs have native code."),
            )
        ]
    return []


def check_visible_devices(ctx: Context) -> list[Finding]:
    """CUDA_VISIBLE_DEVICES hiding every GPU (cause 9)."""
    value = ctx.facts.system.cuda_visible_devices
    if value is None or not ctx.gpu_present:
        return []
    first = value.split(",")[0].strip()
    if first in ("", "-1") or first.lower() in ("none", "void", "nodevfiles"):
        return [
            Finding(
                "cuda-visible-devices-hides-gpus",
                ERROR,
                f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU",
                (
                    f"CUDA_VISIBLE_DEVICES={value!r}",
                    f"GPUs present: {len(ctx.facts.driver.gpus) or len(ctx.facts.driver.pci_devices)}",
                ),
                fix="unset CUDA_VISIBLE_DEVICES",
                detail="An empty value, or an invalid first index such as -1, makes CUDA see no device "
                "(failed call to cuInit: CUDA_ERROR_NO_DEVICE).",
            )
        ]
    return []


def check_wsl(ctx: Context) -> list[Finding]:
    """WSL2 rules: the Windows driver provides libcuda; a Linux driver inside WSL breaks it (cause 13)."""
    system = ctx.facts.system
    if not (ctx.linux and system.wsl):
        return []
    findings = []
    wsl_cuda = [lib for lib in ctx.facts.libraries.libraries if lib.path.endswith("/usr/lib/wsl/lib/libcuda.so.1")]
    linux_cuda = [
        lib
        for lib in ctx.facts.libraries.libraries
        if lib.name.startswith("libcuda.so") and lib.origin == "ld-cache" and "/usr/lib/wsl/" not in lib.path
    ]
    if linux_cuda:
        findings.append(
            Finding(
                "wsl-linux-driver-installed",
                ERROR,
                "A Linux NVIDIA driver is installed inside WSL2",
                tuple(f"{lib.name}: {lib.path}" for lib in linux_cuda),
                fix="sudo apt-get remove --purge '^nvidia-driver-.*' '^libnvidia-.*'",
                detail="Under WSL2 the Windows driver provides libcuda in /usr/lib/wsl/lib; "
                "a Linux driver's copy shadows it.",
            )
        )
    if not wsl_cuda and (ctx.expect_gpu or ctx.facts.driver.dev_nodes):
        findings.append(
            Finding(
                "wsl-no-windows-driver",
                ERROR,
                "WSL2 has no GPU driver: /usr/lib/wsl/lib/libcuda.so.1 is missing",
                (
                    "/usr/lib/wsl/lib/libcuda.so.1: absent",
                    f"/dev/dxg: {'present' if ctx.facts.driver.dev_nodes else 'absent'}",
                ),
                fix="wsl --update",
                detail=f"Install a current NVIDIA driver on Windows (>= {compat.wsl_windows_driver_min()}), "
                "then restart WSL with 'wsl --shutdown'.",
            )
        )
    return findings
