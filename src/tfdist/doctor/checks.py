"""The checks: each reads the :class:`~tfdist.doctor.context.Context` and returns findings with evidence and
the exact fix. The causes and their messages come from compat-data.md section C (one check per cause)."""

from __future__ import annotations

import os
from typing import Callable

from tfdist.doctor import compat
from tfdist.doctor.context import Context
from tfdist.doctor.findings import ERROR, INFO, WARNING, Finding
from tfdist.doctor.recommend import cc_support, install_command, officially_unsupported, recommend
from tfdist.doctor.versions import at_least, minor_of, vtuple
from tfdist.errors import UsageError

Check = Callable[[Context], list[Finding]]


def _gpu_severity(ctx: Context) -> str:
    """Problems that only matter for the GPU are errors when a GPU is there or asked for, else information."""
    return ERROR if ctx.gpu_wanted else INFO


def _reinstall(ctx: Context, *, gpu: bool) -> str:
    version = ctx.tf_version
    broken = compat.load_data("cuda_libs")["pip_cuda_path_broken"]["versions"]
    if gpu and version and minor_of(version) in broken:
        version = recommend(ctx.facts).version or version  # that release's [and-cuda] does not work: move on
    try:
        return install_command(version or "", gpu=gpu)
    except UsageError:
        rec = recommend(ctx.facts).version
        return install_command(rec, gpu=gpu) if rec else "pip install 'tensorflow[and-cuda]'"


def check_platform(ctx: Context) -> list[Finding]:
    """macOS and native Windows: no CUDA build of TensorFlow exists there (causes 1 and 18)."""
    system = ctx.facts.system
    if system.platform == "darwin":
        return [
            Finding(
                "macos-no-cuda",
                ERROR if ctx.expect_gpu else INFO,
                "macOS has no CUDA: TensorFlow runs on the CPU",
                (f"platform: {system.platform}",),
                fix="pip install tensorflow tensorflow-metal",
                detail="tensorflow-metal is Apple's plug-in that runs TensorFlow on Apple GPUs.",
            )
        ]
    if system.platform != "win32" or not ctx.tf_installed:
        return []
    names = {d.name for d in ctx.facts.tensorflow.dists}
    version = ctx.tf_version or ""
    if vtuple(version)[:2] >= (2, 11) or "tensorflow-intel" in names or ctx.facts.tensorflow.is_cuda_build is False:
        return [
            Finding(
                "windows-native-no-cuda",
                _gpu_severity(ctx),
                f"TensorFlow {version} on native Windows has no CUDA build: it will not use the GPU",
                (
                    "platform: win32",
                    f"installed: {', '.join(sorted(names))} {version}",
                    f"build_info is_cuda_build: {ctx.facts.tensorflow.is_cuda_build}",
                ),
                fix="wsl --install",
                alternatives=(
                    "pip install 'tensorflow<2.11'  # Python <= 3.10 with CUDA 11.2 and cuDNN 8.1",
                    "pip install tensorflow-cpu tensorflow-directml-plugin",
                ),
                detail="GPU support on native Windows ended with TF 2.10. In WSL2, run: "
                "pip install 'tensorflow[and-cuda]'.",
            )
        ]
    return []


def check_installation(ctx: Context) -> list[Finding]:
    """Which TensorFlow is installed: none, several at once, CPU-only, or files without metadata (causes 4, 6)."""
    tf = ctx.facts.tensorflow
    findings: list[Finding] = []
    if not ctx.tf_installed:
        rec = recommend(ctx.facts)
        return [
            Finding(
                "tensorflow-not-installed",
                INFO,
                "TensorFlow is not installed in this Python environment",
                (f"python: {ctx.facts.system.python_executable}",),
                fix=rec.command,
                detail="tfdist doctor --recommend explains the choice of version.",
            )
        ]
    if tf.dists and tf.build_info_path is None:
        findings.append(
            Finding(
                "tensorflow-files-missing",
                ERROR,
                "A TensorFlow distribution is registered but its files are gone",
                tuple(f"{d.name} {d.version}: {d.location}" for d in tf.dists),
                fix=f"pip install --force-reinstall {_reinstall(ctx, gpu=ctx.gpu_wanted).split(' ', 2)[2]}",
            )
        )
    shipping = [d for d in tf.dists if d.name not in tf.metapackages]
    if len(shipping) > 1:
        versions = {d.version for d in shipping}
        owner = tf.files_owner
        owner_kind = compat.load_data("tf_distributions")["distributions"].get(owner or "", {}).get("kind")
        severity = ERROR if len(versions) > 1 or (owner_kind == "cpu" and ctx.gpu_wanted) else WARNING
        evidence = [f"{d.name} {d.version} ({d.location})" for d in shipping]
        evidence.append(
            f"tensorflow/python/platform/build_info.py on disk comes from: {owner or 'none of them (mixed files)'}"
        )
        names = " ".join(d.name for d in tf.dists)
        findings.append(
            Finding(
                "several-tensorflow-distributions",
                severity,
                f"{len(shipping)} TensorFlow distributions share one 'tensorflow' package folder",
                tuple(evidence),
                fix=f"pip uninstall -y {names} && {_reinstall(ctx, gpu=ctx.linux and ctx.gpu_wanted)}",
                detail="Each one overwrites the other's files; the last installed wins and uninstalling one breaks the "
                "other. tf-keras depends on 'tensorflow', so 'tensorflow-cpu' next to it always brings both.",
            )
        )
    if "tensorflow-gpu" in {d.name for d in tf.dists} and vtuple(ctx.tf_version or "")[:2] >= (2, 1):
        findings.append(
            Finding(
                "tensorflow-gpu-retired",
                INFO,
                "'tensorflow-gpu' is a retired name",
                ("installed: tensorflow-gpu",),
                fix="pip uninstall -y tensorflow-gpu && " + _reinstall(ctx, gpu=True),
                detail="Since 2.1 it is the same as 'tensorflow'; pip install tensorflow-gpu fails since Dec 2022.",
            )
        )
    if ctx.linux and tf.is_cuda_build is False:
        cpu_names = [d.name for d in tf.dists if d.name != "tensorflow"] or [d.name for d in tf.dists]
        findings.append(
            Finding(
                "cpu-only-build",
                _gpu_severity(ctx),
                f"The installed TensorFlow {ctx.tf_version or ''} is a CPU-only build".replace("  ", " "),
                (
                    f"{tf.build_info_path}: is_cuda_build = False",
                    f"installed: {', '.join(d.name for d in tf.dists) or 'unknown'}",
                ),
                fix=f"pip uninstall -y {' '.join(cpu_names) or 'tensorflow'} && {_reinstall(ctx, gpu=True)}",
                detail=None if ctx.gpu_wanted else "Fine on this machine: it has no NVIDIA GPU.",
            )
        )
    return findings


def check_python_glibc(ctx: Context) -> list[Finding]:
    """Python or glibc outside the installed wheel's range (cause 5)."""
    build, system = ctx.build, ctx.facts.system
    if build is None or not ctx.tf_installed:
        return []
    findings = []
    rec = recommend(ctx.facts)
    if not build.supports_python(system.python_version):
        findings.append(
            Finding(
                "python-unsupported",
                ERROR,
                f"TensorFlow {build.version} supports Python {build.python_min}-{build.python_max}, "
                f"this is {system.python_version}",
                (
                    f"python: {system.python_executable} {system.python_version}",
                    f"TF {build.version} Python range (tested build configurations)",
                ),
                fix=rec.command,
                alternatives=(f"uv venv --python {build.python_max} .venv",),
            )
        )
    if ctx.linux and system.glibc and not at_least(system.glibc, build.glibc_min):
        findings.append(
            Finding(
                "glibc-too-old",
                ERROR,
                f"TensorFlow {build.version} needs glibc >= {build.glibc_min}, this system has {system.glibc}",
                (f"glibc: {system.glibc}", f"TF {build.version} wheel tag: {build.platform_tag}"),
                fix=rec.command,
                detail="pip refuses the wheel (or it fails to import); an older release or a newer OS fixes it.",
            )
        )
    return findings


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


def check_architecture(ctx: Context) -> list[Finding]:
    """GPU compute capability against the architectures compiled into the wheel (cause 12, PTX JIT)."""
    if not (ctx.cuda_build and ctx.driver_ok):
        return []
    findings = []
    seen: set[tuple[str, str]] = set()
    for gpu in ctx.facts.driver.gpus:
        cc = gpu.compute_capability
        if not cc or (gpu.name, cc) in seen:
            continue  # one finding per GPU model, not per card
        seen.add((gpu.name, cc))
        evidence = (
            f"GPU {gpu.index}: {gpu.name}, compute capability {cc} (from {gpu.cc_source})",
            f"compiled into TF {ctx.tf_version}: {', '.join(ctx.compiled) or 'not recorded'}",
        )
        support = cc_support(cc, ctx.compiled)
        if officially_unsupported(cc, ctx.tf_version or "0"):
            rule = compat.load_data("gpus")["official_tf_unsupported"]
            findings.append(
                Finding(
                    "gpu-arch-unsupported",
                    ERROR,
                    f"{gpu.name} ({compat.architecture_of(cc)}, compute capability {cc}) "
                    "is not supported by official TensorFlow wheels",
                    evidence,
                    fix=f"docker run --gpus all -it --rm {rule['container']}",
                    detail=rule["why"] + ". Sources: " + ", ".join(rule["sources"]) + ".",
                )
            )
        elif support == "none":
            newest = _newest_supporting(ctx, cc)
            findings.append(
                Finding(
                    "gpu-arch-too-old",
                    ERROR,
                    f"TensorFlow {ctx.tf_version} has no code for {gpu.name} "
                    f"(compute capability {cc}): the GPU is ignored",
                    evidence,
                    fix=install_command(newest, gpu=True) if newest else None,
                    detail="TensorFlow logs 'Ignoring visible gpu device ... "
                    "The minimum required Cuda capability is ...' "
                    "at INFO level, hidden by TF_CPP_MIN_LOG_LEVEL>=1.",
                )
            )
        elif support == "ptx":
            cache = compat.load_data("gpus")["ptx_jit_cache"]
            findings.append(
                Finding(
                    "ptx-jit",
                    WARNING,
                    f"{gpu.name} runs TensorFlow {ctx.tf_version} through PTX JIT: the first run is slow",
                    evidence,
                    fix=f"export {cache['variable']}={cache['value']}",
                    detail="No native code for this architecture, so CUDA compiles the PTX on first use "
                    "and caches it in "
                    "~/.nv/ComputeCache; a larger cache keeps it across runs.",
                )
            )
    return findings


def _newest_supporting(ctx: Context, cc: str) -> str | None:
    python = ctx.facts.system.python_version
    for version in reversed(compat.known_tf_versions()):
        build = compat.tf_build(version)
        if build.supports_python(python) and cc_support(cc, build.compute_capabilities) in ("sass", "ptx"):
            return version
    return None


def check_libraries(ctx: Context) -> list[Finding]:
    """CUDA libraries TF opens, cuDNN version, the 2.16 pip path bug, shadowing and ptxas (causes 2, 3, 11, 14, 17)."""
    if not (ctx.linux and ctx.cuda_build and ctx.cuda and ctx.gpu_present):
        return []
    findings: list[Finding] = []
    required = compat.cuda_libraries(ctx.cuda, ctx.cudnn_major)
    missing = {comp: so for comp, so in required.items() if so not in ctx.loader}
    libs = ctx.facts.libraries.libraries
    pip_libs = {lib.name: lib for lib in libs if lib.origin.startswith("pip")}
    if missing:
        in_pip = {comp: so for comp, so in missing.items() if so in pip_libs}
        if (
            in_pip
            and not ctx.pip_libs_visible
            and minor_of(ctx.tf_version or "") in compat.load_data("cuda_libs")["pip_cuda_path_broken"]["versions"]
        ):
            dirs = sorted({os.path.dirname(pip_libs[so].path) for so in in_pip.values()})
            findings.append(
                Finding(
                    "tf216-pip-cuda-path",
                    ERROR,
                    f"TensorFlow {ctx.tf_version} does not find the CUDA libraries that tensorflow[and-cuda] installed",
                    tuple(f"{so}: only in {pip_libs[so].path}" for so in in_pip.values()),
                    fix="export LD_LIBRARY_PATH=" + ":".join(dirs) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}",
                    alternatives=(install_command("2.17", gpu=True),),
                    detail=compat.load_data("cuda_libs")["pip_cuda_path_broken"]["source"] + ".",
                )
            )
            missing = {c: s for c, s in missing.items() if c not in in_pip}
    if missing:
        findings.append(_missing_libraries(ctx, missing))
    findings += _cudnn_version(ctx)
    findings += _shadowing(ctx, pip_libs)
    findings += _libcuda(ctx)
    findings += _ptxas(ctx)
    return findings


def _missing_libraries(ctx: Context, missing: dict[str, str]) -> Finding:
    libs = ctx.facts.libraries.libraries
    places = "LD_LIBRARY_PATH, the ldconfig cache" + (" or site-packages/nvidia" if ctx.pip_libs_visible else "")
    evidence = [f"{so}: not found on {places}" for so in missing.values()]
    if "cudnn" in missing:
        others = sorted({lib.name for lib in libs if lib.name.startswith("libcudnn.so.") and lib.name.count(".") == 2})
        if others:
            evidence.append(
                f"other cuDNN majors found: {', '.join(others)}; TF {ctx.tf_version} needs cuDNN {ctx.cudnn_major}"
            )
    hidden = sorted(
        {
            os.path.dirname(lib.path)
            for lib in libs
            if lib.name in missing.values() and not lib.on_loader_path and not lib.origin.startswith("pip")
        }
    )
    major_clash = "cudnn" in missing and len(evidence) > len(missing)
    if hidden:
        fix = "export LD_LIBRARY_PATH=" + ":".join(hidden) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
    elif vtuple(ctx.tf_version or "")[:2] >= (2, 14):
        fix = f"pip install 'tensorflow[and-cuda]=={ctx.tf_version}'"
    else:
        build = ctx.build
        cuda, cudnn = (build.cuda, build.cudnn) if build else (ctx.cuda, ctx.cudnn_major)
        fix = f"install CUDA {cuda} and cuDNN {cudnn}, then add their lib64 to LD_LIBRARY_PATH"
    return Finding(
        "cudnn-major-mismatch" if major_clash and len(missing) == 1 else "cuda-libraries-missing",
        ERROR,
        f"{len(missing)} CUDA librar{'y' if len(missing) == 1 else 'ies'} TensorFlow {ctx.tf_version} opens "
        "cannot be found: " + ", ".join(missing.values()),
        tuple(evidence),
        fix=fix,
        detail="TensorFlow logs 'Could not load dynamic library ...' and 'Cannot dlopen some GPU libraries ... "
        "Skipping registering GPU devices', then runs on the CPU.",
    )


def _cudnn_version(ctx: Context) -> list[Finding]:
    build, tf = ctx.build, ctx.facts.tensorflow
    if build is None or not build.cudnn or not ctx.cudnn_major:
        return []
    lib = ctx.loader.get(f"libcudnn.so.{ctx.cudnn_major}")
    findings = []
    if lib is not None and lib.version and vtuple(lib.version)[:2] < vtuple(build.cudnn)[:2]:
        pin = build.and_cuda_pins.get(f"nvidia-cudnn-cu{vtuple(ctx.cuda or '0')[0]}")
        evidence = [
            f"{lib.name} -> {lib.path} (cuDNN {lib.version}, {lib.origin})",
            f"TensorFlow {ctx.tf_version} was compiled with cuDNN {build.cudnn}",
        ]
        if tf.torch_cudnn_pin:
            evidence.append(f"torch {tf.torch} requires {tf.torch_cudnn_pin}")
        dist = f"nvidia-cudnn-cu{vtuple(ctx.cuda or '0')[0]}"
        fix = f"pip install '{dist}{pin}'" if pin and lib.origin.startswith("pip") else None
        findings.append(
            Finding(
                "cudnn-too-old",
                ERROR,
                f"cuDNN {lib.version} is older than the {build.cudnn} TensorFlow {ctx.tf_version} was compiled with",
                tuple(evidence),
                fix=fix
                or f"remove {os.path.dirname(lib.path)} from LD_LIBRARY_PATH or upgrade cuDNN to >= {build.cudnn}",
                alternatives=("python -m venv .venv-tf  # keep torch and TensorFlow in separate environments",)
                if tf.torch
                else (),
                detail="TensorFlow lists the GPU but convolutions fail: "
                "'Loaded runtime CuDNN library: X but source was "
                "compiled with: Y' then 'DNN library initialization failed'.",
            )
        )
    elif tf.torch_cudnn_pin and build.and_cuda_pins:
        findings += _torch_pin(ctx)
    return findings


def _torch_pin(ctx: Context) -> list[Finding]:
    tf, build = ctx.facts.tensorflow, ctx.build
    if build is None:
        return []
    requirement = (tf.torch_cudnn_pin or "").split(";")[0]
    dist = requirement.split("=")[0].split("<")[0].split(">")[0].strip()
    tf_pin = build.and_cuda_pins.get(dist)
    if not tf_pin or "==" not in requirement:
        return []
    torch_version = requirement.split("==", 1)[1].strip()
    from packaging.specifiers import SpecifierSet  # only when torch is installed: packaging costs start-up time

    if torch_version in SpecifierSet(tf_pin):
        return []
    return [
        Finding(
            "torch-cudnn-pin",
            WARNING,
            f"torch {tf.torch} pins {dist}=={torch_version}, outside TensorFlow's {tf_pin}",
            (
                f"torch requires: {requirement}",
                f"tensorflow[and-cuda] {ctx.tf_version} requires: {dist}{tf_pin}",
                f"installed: {dist} {tf.nvidia_wheels.get(dist, 'not installed')}",
            ),
            fix="python -m venv .venv-tf  # a separate environment for TensorFlow",
            detail="Only one cuDNN wheel can be installed; whichever pip resolved last decides which framework breaks.",
        )
    ]


def _shadowing(ctx: Context, pip_libs: dict[str, object]) -> list[Finding]:
    if not ctx.pip_libs_visible:
        return []
    findings = []
    for lib in ctx.facts.libraries.libraries:
        if lib.origin != "LD_LIBRARY_PATH" or lib.name not in pip_libs:
            continue
        pip_lib = pip_libs[lib.name]
        if lib.version and getattr(pip_lib, "version", None) and vtuple(lib.version)[:2] != vtuple(pip_lib.version)[:2]:  # type: ignore[attr-defined]
            findings.append(
                Finding(
                    "system-cuda-shadows-pip",
                    WARNING,
                    f"{lib.name} from LD_LIBRARY_PATH ({lib.version}) shadows the pip wheel's ({pip_lib.version})",  # type: ignore[attr-defined]
                    (f"LD_LIBRARY_PATH: {lib.path}", f"pip: {pip_lib.path}"),  # type: ignore[attr-defined]
                    fix="export LD_LIBRARY_PATH="
                    + ":".join(p for p in ctx.facts.system.ld_library_path if p != os.path.dirname(lib.path)),
                    detail="Keep one source of CUDA libraries per environment; the pip wheels match TensorFlow's pins.",
                )
            )
    return findings


def _libcuda(ctx: Context) -> list[Finding]:
    if not ctx.driver_ok or ctx.facts.libraries.ldconfig is None or "libcuda.so.1" in ctx.loader:
        return []
    return [
        Finding(
            "libcuda-missing",
            ERROR,
            "The driver answers but libcuda.so.1 is not on the loader path",
            (
                "libcuda.so.1: not in the ldconfig cache nor on LD_LIBRARY_PATH",
                f"driver {ctx.facts.driver.driver_version} via {ctx.facts.driver.source}",
            ),
            fix="sudo ldconfig",
            detail="TensorFlow logs 'Could not load dynamic library libcuda.so.1'. In a container, start it "
            "with the NVIDIA runtime (docker run --gpus all) so the driver libraries are mounted.",
        )
    ]


def _ptxas(ctx: Context) -> list[Finding]:
    libs = ctx.facts.libraries
    if not ctx.driver_ok or vtuple(ctx.tf_version or "")[:2] < (2, 15) or libs.ptxas:
        return []
    venv_bin = os.path.join(ctx.facts.system.environment_prefix or "$VIRTUAL_ENV", "bin")
    if libs.pip_ptxas:
        return [
            Finding(
                "ptxas-not-on-path",
                INFO,
                "ptxas from nvidia-cuda-nvcc is not on PATH",
                (f"pip ptxas: {libs.pip_ptxas}", "PATH: no ptxas"),
                fix=f"ln -sf {libs.pip_ptxas} {venv_bin}/ptxas",
                detail="XLA falls back to the driver for PTX compilation ('Relying on driver to perform ptx "
                "compilation'), which is slower.",
            )
        ]
    pin = ctx.build.and_cuda_pins.get(f"nvidia-cuda-nvcc-cu{vtuple(ctx.cuda or '0')[0]}") if ctx.build else None
    return [
        Finding(
            "ptxas-missing",
            WARNING,
            "No ptxas found: XLA falls back to the driver for PTX compilation",
            ("PATH: no ptxas", "site-packages/nvidia/cuda_nvcc: absent"),
            fix=f"pip install 'nvidia-cuda-nvcc-cu{vtuple(ctx.cuda or '0')[0]}{pin or ''}'",
            detail="TensorFlow logs 'Couldn't get ptxas version' then 'Relying on driver to perform ptx compilation'.",
        )
    ]


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


def check_keras(ctx: Context) -> list[Finding]:
    """Keras 3 active where multi-worker training needs tf-keras."""
    tf, system = ctx.facts.tensorflow, ctx.facts.system
    if not ctx.tf_installed or vtuple(ctx.tf_version or "")[:2] < (2, 16) or not tf.keras or vtuple(tf.keras)[0] < 3:
        return []
    legacy = (system.tf_use_legacy_keras or "").lower() in ("1", "true")
    minor = minor_of(ctx.tf_version or "")
    if tf.tf_keras is None and legacy:
        return [
            Finding(
                "legacy-keras-without-tf-keras",
                ERROR,
                "TF_USE_LEGACY_KERAS=1 but tf-keras is not installed: tf.keras fails to import",
                (f"TF_USE_LEGACY_KERAS={system.tf_use_legacy_keras!r}", "tf-keras: not installed"),
                fix=f"pip install 'tf-keras=={minor}.*'",
                alternatives=("unset TF_USE_LEGACY_KERAS",),
            )
        ]
    if tf.tf_keras is None:
        return [
            Finding(
                "keras3-multiworker",
                WARNING,
                f"Keras {tf.keras} is tf.keras and tf-keras is not installed",
                (f"keras {tf.keras}", "tf-keras: not installed"),
                fix=f"pip install 'tf-keras=={minor}.*' && export TF_USE_LEGACY_KERAS=1",
                detail="Keras 3 does not run multi-worker model.fit under MultiWorkerMirroredStrategy; tf-keras does.",
            )
        ]
    findings = []
    if minor_of(tf.tf_keras) != minor:
        findings.append(
            Finding(
                "tf-keras-version-mismatch",
                WARNING,
                f"tf-keras {tf.tf_keras} does not match TensorFlow {ctx.tf_version}",
                (f"tf-keras {tf.tf_keras}", f"tensorflow {ctx.tf_version}"),
                fix=f"pip install 'tf-keras=={minor}.*'",
            )
        )
    if not legacy:
        findings.append(
            Finding(
                "keras3-active",
                INFO,
                f"tf.keras is Keras {tf.keras}; tf-keras {tf.tf_keras} is installed but not selected",
                (
                    f"TF_USE_LEGACY_KERAS={system.tf_use_legacy_keras!r}"
                    if system.tf_use_legacy_keras is not None
                    else "TF_USE_LEGACY_KERAS: unset",
                ),
                fix="export TF_USE_LEGACY_KERAS=1",
                detail="Needed for multi-worker training; "
                "tfdist launch sets it for its tasks when tf-keras is installed.",
            )
        )
    return findings


ALL_CHECKS: tuple[Check, ...] = (
    check_platform,
    check_installation,
    check_python_glibc,
    check_wsl,
    check_driver,
    check_visible_devices,
    check_architecture,
    check_libraries,
    check_keras,
)


def run_checks(ctx: Context) -> list[Finding]:
    """Every check, in order."""
    findings: list[Finding] = []
    for check in ALL_CHECKS:
        findings += check(ctx)
    return findings
