"""Checks of the GPU against the build and of the CUDA libraries TensorFlow opens: architecture, missing
libraries, the 2.16 pip path bug, cuDNN version, torch's pin, shadowing and libcuda (causes 2, 3, 11, 12 and 14;
ptxas and libdevice, cause 17, are checked in checks/xla.py)."""

from __future__ import annotations

import os
from shlex import quote

from tfdist.compat import tables as compat
from tfdist.doctor.context import Context
from tfdist.doctor.findings import ERROR, INFO, WARNING, Finding
from tfdist.doctor.checks.cuda_libs import check_missing_libraries, export_ld_path, owner_of
from tfdist.doctor.matching import conda_install_command, releases_for
from tfdist.doctor.recommend import cc_support, install_command, officially_unsupported
from tfdist.compat.versions import minor_of, vtuple


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
    """CUDA libraries TF opens, cuDNN version, the 2.16 pip path bug and shadowing (causes 2, 3, 11, 14)."""
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
                    fix=export_ld_path(dirs),
                    alternatives=(install_command("2.17", gpu=True),),
                    detail=compat.load_data("cuda_libs")["pip_cuda_path_broken"]["source"] + ".",
                )
            )
            missing = {c: s for c, s in missing.items() if c not in in_pip}
    findings += check_missing_libraries(ctx, missing)
    findings += _cudnn_version(ctx)
    findings += _shadowing(ctx, pip_libs)
    findings += _libcuda(ctx)
    return findings


def _cudnn_version(ctx: Context) -> list[Finding]:
    build, tf = ctx.build, ctx.facts.tensorflow
    if build is None or not build.cudnn or not ctx.cudnn_major:
        return []
    lib = ctx.loader.get(f"libcudnn.so.{ctx.cudnn_major}")
    findings = []
    # A version known only to its major (a wheel's libcudnn.so.9 with no minor in its name) cannot be compared.
    known = vtuple(lib.version or "") if lib is not None else ()
    if lib is not None and len(known) >= 2 and known[:2] < vtuple(build.cudnn)[:2]:
        pin = build.and_cuda_pins.get(f"nvidia-cudnn-cu{vtuple(ctx.cuda or '0')[0]}")
        evidence = [
            f"{lib.name} -> {lib.path} (cuDNN {lib.version}, {owner_of(lib)})",
            f"TensorFlow {ctx.tf_version} was compiled with cuDNN {build.cudnn}",
        ]
        if tf.torch_cudnn_pin:
            evidence.append(f"torch {tf.torch} requires {tf.torch_cudnn_pin}")
        dist = f"nvidia-cudnn-cu{vtuple(ctx.cuda or '0')[0]}"
        fix = f"pip install '{dist}{pin}'" if pin and lib.origin.startswith("pip") else None
        if fix is None and ctx.facts.conda.prefix and (lib.owner or "").startswith("conda "):
            fix = conda_install_command(build)
        # The other direction: the newest release compiled with a cuDNN no newer than this one.
        cudart = next((x for x in ctx.loader.values() if x.name.startswith("libcudart.so.")), None)
        python = ctx.facts.system.python_version
        here = releases_for(cudart.version or ctx.cuda or "", lib.version, python) if cudart else []
        older: tuple[str, ...] = ()
        if here:
            built = compat.tf_build(here[-1]).cudnn
            older = (install_command(here[-1], gpu=lib.origin.startswith("pip")) + f"  # built with cuDNN {built}",)
        findings.append(
            Finding(
                "cudnn-too-old",
                ERROR,
                f"cuDNN {lib.version} is older than the {build.cudnn} TensorFlow {ctx.tf_version} was compiled with",
                tuple(evidence),
                fix=fix
                or f"remove {os.path.dirname(lib.path)} from LD_LIBRARY_PATH or upgrade cuDNN to >= {build.cudnn}",
                alternatives=older
                + (("python -m venv .venv-tf  # keep torch and TensorFlow in separate environments",) if tf.torch else ()),
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
                    + quote(":".join(p for p in ctx.facts.system.ld_library_path if p != os.path.dirname(lib.path))),
                    detail="Keep one source of CUDA libraries per environment; the pip wheels match TensorFlow's pins.",
                )
            )
    return findings


def _libcuda(ctx: Context) -> list[Finding]:
    if not ctx.driver_ok or ctx.facts.libraries.ldconfig is None or "libcuda.so.1" in ctx.loader:
        return []
    if ctx.facts.system.wsl:
        return []  # the WSL2 check names the Windows driver's share and the WSL fix
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

