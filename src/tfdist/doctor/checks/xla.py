"""XLA's GPU toolchain (issue: the GPU is listed, then the first ``fit()`` fails to compile). How much of training
XLA compiles follows the Keras the run uses (:mod:`tfdist.doctor.keras_choice`): every fit under Keras 3, the default
optimizers' update step under Keras 2 from TF 2.11, only ``jit_compile=True`` code before. Messages and rules:
``xla_toolchain.json`` and the threads it cites."""

from __future__ import annotations

import os

from tfdist.compat import tables as compat
from tfdist.compat.versions import at_least, vtuple
from tfdist.doctor.context import Context
from tfdist.doctor.facts import Ptxas
from tfdist.doctor.findings import ERROR, INFO, WARNING, Finding
from tfdist.doctor.keras_choice import EVERY_FIT, XlaExposure, xla_exposure
from tfdist.doctor import xla_fixes as fixes

# A missing libdevice stops every fit where Keras compiles the whole step with XLA; where only some code goes through
# XLA (the optimizer's update step, jit_compile=True) TensorFlow runs and the finding says which code fails.
_LIBDEVICE_SEVERITY_BY_EXPOSURE = {EVERY_FIT: ERROR}


def _data() -> dict:
    return compat.load_data("xla_toolchain")


def _exposure(ctx: Context) -> XlaExposure:
    system = ctx.facts.system
    return ctx.xla_exposure or xla_exposure(ctx.tf_version, ctx.facts.tensorflow.tf_keras, system.tf_use_legacy_keras)


def _libdevice_severity(ctx: Context) -> str:
    """Information on a machine that will not use the GPU; else by how much XLA compiles (see above)."""
    if not (ctx.driver_ok or ctx.expect_gpu):
        return INFO
    return _LIBDEVICE_SEVERITY_BY_EXPOSURE.get(_exposure(ctx).level, WARNING)


def _keras_line(ctx: Context) -> tuple[str, ...]:
    keras = _exposure(ctx).keras
    return (f"Keras {keras.major}: {keras.why}",)


def _bites(ctx: Context, severity: str) -> str:
    """The title's tail: when the problem bites."""
    return " (only matters on a GPU)" if severity == INFO else f": {_exposure(ctx).bites}"


def _searched(ctx: Context) -> tuple[str, ...]:
    lines = []
    for root in ctx.facts.xla.roots:
        state = "libdevice.10.bc" if root.libdevice else ("empty nvvm/libdevice" if root.libdevice_dir else "no nvvm/libdevice")
        lines.append(f"searched {root.path} ({root.label}): {state}")
    return tuple(lines)


def _context_evidence(ctx: Context) -> tuple[str, ...]:
    xla = ctx.facts.xla
    lines = []
    if xla.xla_flags is not None:
        lines.append(f"XLA_FLAGS={xla.xla_flags}")
    if xla.xla_flags_error:
        lines.append(xla.xla_flags_error)
    for name, value in xla.cuda_env.items():
        lines.append(f"{name}={value} (XLA does not read it; only --xla_gpu_cuda_data_dir in XLA_FLAGS counts)")
    if xla.tf_xla_flags and "auto_jit" in xla.tf_xla_flags:
        lines.append(f"TF_XLA_FLAGS={xla.tf_xla_flags} (auto-clustering: more code goes through XLA)")
    if xla.nvcc_packages:
        lines.append("installed: " + ", ".join(xla.nvcc_packages))
    else:
        lines.append("installed: no nvidia-cuda-nvcc wheel, no conda cuda-nvcc")
    for loose in xla.loose_libdevice:
        lines.append(f"{loose} exists, but not inside an nvvm/libdevice folder, so XLA cannot use it")
    return tuple(lines)


def _alternatives(ctx: Context, fix: str) -> tuple[str, ...]:
    options = [fixes.package_fix(ctx)] + [fixes.xla_flags_line(ctx, r.path) for r in fixes.usable_roots(ctx, want="libdevice")]
    options.append(fixes.keras_workaround(ctx))
    return tuple(dict.fromkeys(o for o in options if o != fix))


def _libdevice_fix(ctx: Context) -> str:
    usable = fixes.usable_roots(ctx, want="libdevice")
    if usable:
        return fixes.xla_flags_line(ctx, usable[0].path)
    for loose in ctx.facts.xla.loose_libdevice:
        if ctx.facts.conda.prefix and loose.startswith(ctx.facts.conda.prefix):
            return fixes.copy_recipe(ctx, loose)
        return fixes.link_recipe(ctx, loose)
    return fixes.package_fix(ctx)


def check_libdevice(ctx: Context) -> list[Finding]:
    """libdevice where XLA will look: missing, an empty nvvm/libdevice folder, an XLA_FLAGS folder without it."""
    xla = ctx.facts.xla
    if not xla.probed:
        return []
    severity = _libdevice_severity(ctx)
    chosen = next((r for r in xla.roots if r.libdevice_dir), None)
    detail_fit = _exposure(ctx).detail
    data_root = xla.roots[0] if xla.roots and xla.data_dir else None
    findings: list[Finding] = []
    if data_root is not None and not data_root.libdevice_dir:
        inner = os.path.normpath(xla.data_dir or "")
        hint = ""
        if inner.endswith(os.path.join("nvvm", "libdevice")) or os.path.isfile(os.path.join(inner, "libdevice.10.bc")):
            up = os.path.dirname(os.path.dirname(inner)) if inner.endswith("libdevice") else inner
            hint = f"; it names the libdevice folder itself, the flag wants the CUDA root above it ({up})"
            fix = fixes.xla_flags_line(ctx, up)
        else:
            fix = None
        if chosen is not None and chosen.libdevice:
            return [
                Finding(
                    "xla-flags-data-dir-ignored",
                    WARNING if severity == ERROR else INFO,
                    f"XLA_FLAGS sets --xla_gpu_cuda_data_dir={xla.data_dir}, which has no nvvm/libdevice: "
                    f"XLA uses {chosen.path} instead{hint}",
                    _searched(ctx) + _context_evidence(ctx),
                    fix=fix or fixes.xla_flags_line(ctx, chosen.path),
                    detail="ptxas is looked for in that folder's bin first, so a wrong data dir can also pick the "
                    "wrong ptxas.",
                )
            ]
        title = f"XLA_FLAGS points --xla_gpu_cuda_data_dir at {xla.data_dir}, which has no nvvm/libdevice{hint}"
        findings.append(
            Finding(
                "xla-flags-data-dir-no-libdevice",
                severity,
                title + _bites(ctx, severity),
                _searched(ctx) + _context_evidence(ctx) + _keras_line(ctx),
                fix=fix or _libdevice_fix(ctx),
                alternatives=_alternatives(ctx, fix or _libdevice_fix(ctx)),
                detail=detail_fit + "'Can't find libdevice directory ${CUDA_DIR}/nvvm/libdevice', then "
                "'libdevice not found at ./libdevice.10.bc'.",
            )
        )
        return findings if chosen is None else findings + _empty_dir(ctx, chosen.path, severity, detail_fit)
    if chosen is None:
        cudatoolkit = ctx.facts.conda.package("cudatoolkit")
        nvvm_packages = any(p.startswith(("conda cuda-nvcc", "conda cuda-nvvm")) for p in xla.nvcc_packages)
        fix = _libdevice_fix(ctx)
        if cudatoolkit is not None and not nvvm_packages:
            finding_id = "xla-conda-cudatoolkit-no-nvvm"
            title = (
                f"conda's cudatoolkit {cudatoolkit.version} gives XLA no nvvm/libdevice folder: "
                f"XLA on TensorFlow {ctx.tf_version} finds no libdevice"
            )
        else:
            finding_id = "xla-libdevice-missing"
            title = f"XLA on TensorFlow {ctx.tf_version} finds no libdevice (nvvm/libdevice/libdevice.10.bc)"
        findings.append(
            Finding(
                finding_id,
                severity,
                title + _bites(ctx, severity),
                _searched(ctx) + _context_evidence(ctx) + _ptxas_line(ctx) + _keras_line(ctx),
                fix=fix,
                alternatives=_alternatives(ctx, fix),
                detail=detail_fit + "'Can't find libdevice directory ${CUDA_DIR}/nvvm/libdevice' then "
                "'libdevice not found at ./libdevice.10.bc'. XLA reads neither CUDA_DIR nor LD_LIBRARY_PATH here; "
                "only the folders above and --xla_gpu_cuda_data_dir in XLA_FLAGS. TF_XLA_FLAGS cannot switch "
                "jit_compile=True off (it only steers auto-clustering): without a libdevice, train without XLA.",
            )
        )
        return findings
    return _empty_dir(ctx, chosen.path, severity, detail_fit)


def _empty_dir(ctx: Context, path: str, severity: str, detail_fit: str) -> list[Finding]:
    root = next(r for r in ctx.facts.xla.roots if r.path == path)
    if root.libdevice:
        return []
    fix = _libdevice_fix(ctx)
    return [
        Finding(
            "xla-libdevice-dir-empty",
            severity,
            f"XLA will use {os.path.join(path, 'nvvm', 'libdevice')}, which has no libdevice.10.bc"
            + _bites(ctx, severity),
            _searched(ctx) + _context_evidence(ctx) + _keras_line(ctx),
            fix=fix,
            alternatives=_alternatives(ctx, fix),
            detail=detail_fit + f"'libdevice not found at {os.path.join(path, 'nvvm', 'libdevice', 'libdevice.10.bc')}' "
            "(XLA takes the first candidate whose nvvm/libdevice is a folder, without looking inside).",
        )
    ]


def _ptxas_line(ctx: Context) -> tuple[str, ...]:
    ptxas = ctx.facts.xla.ptxas
    if ptxas is None or not ptxas.path:
        return ("ptxas: none found (PATH, the data dir's bin, the candidates' bin)",)
    return (f"ptxas: {ptxas.path} ({ptxas.version or 'version unknown'}, found by {ptxas.found_by})",)


def _ptxas_fix(ctx: Context) -> str:
    usable = fixes.usable_roots(ctx, want="ptxas")
    return fixes.xla_flags_line(ctx, usable[0].path) if usable else fixes.package_fix(ctx)


def check_ptxas(ctx: Context) -> list[Finding]:
    """The ptxas XLA will run: missing, silent, refused, too old for TF's CUDA, or newer than the driver."""
    xla = ctx.facts.xla
    if not (xla.probed and (ctx.driver_ok or ctx.expect_gpu)):
        return []
    if xla.libdevice_root is None and fixes.usable_roots(ctx, want="libdevice") == [] and (xla.ptxas is None or not xla.ptxas.path):
        return []  # the libdevice finding already names the package that brings both
    rules = _data()["ptxas_rules"]
    ptxas = xla.ptxas
    if ptxas is None or not ptxas.path:
        no_fallback = at_least(ctx.tf_version, rules["no_fallback_since"])
        fix = _ptxas_fix(ctx)
        alternatives = (fixes.package_fix(ctx),)
        if no_fallback:
            alternatives += ("export XLA_FLAGS=" + _quote_flags(ctx, "--xla_gpu_unsafe_fallback_to_driver_on_ptxas_not_found=true"),)
        return [
            Finding(
                "xla-ptxas-missing",
                ERROR if no_fallback else WARNING,
                "XLA finds no ptxas" + (": it will not compile for the GPU" if no_fallback else ": it falls back to the driver"),
                _ptxas_line(ctx) + tuple(f"refused: {s}" for s in (ptxas.skipped if ptxas else ())) + _context_evidence(ctx),
                fix=fix,
                alternatives=tuple(a for a in alternatives if a != fix),
                detail=rules["no_fallback_why"] if no_fallback else "TensorFlow logs 'Couldn't get ptxas version' then "
                "'Relying on driver to perform ptx compilation', which is slower and fails for PTX newer than the driver.",
            )
        ]
    return _ptxas_version(ctx, ptxas, rules)


def _quote_flags(ctx: Context, flag: str) -> str:
    from shlex import quote

    existing = (ctx.facts.xla.xla_flags or "").strip()
    return quote(f"{existing} {flag}".strip())


def _ptxas_version(ctx: Context, ptxas: Ptxas, rules: dict) -> list[Finding]:
    evidence = _ptxas_line(ctx) + (f"ptxas --version: {ptxas.error}",) * bool(ptxas.error)
    if ptxas.version is None:
        return [
            Finding(
                "xla-ptxas-broken",
                WARNING,
                f"{ptxas.path} does not answer --version ({ptxas.error})",
                evidence,
                fix=_ptxas_fix(ctx),
                detail="XLA logs 'Couldn't get ptxas version' and falls back to the driver or fails.",
            )
        ]
    findings = []
    version, major = ptxas.version, fixes.cuda_major(ctx)
    if major and vtuple(version)[0] < int(major):
        findings.append(
            Finding(
                "xla-ptxas-too-old",
                ERROR,
                f"XLA will run ptxas {version} ({ptxas.path}), older than the CUDA {ctx.cuda} TensorFlow generates PTX for",
                evidence,
                fix=_ptxas_fix(ctx),
                alternatives=(fixes.package_fix(ctx),),
                detail="ptxas rejects the newer PTX: 'ptxas exited with non-zero error code' ('Unsupported .version'). "
                "XLA prefers a ptxas on PATH to the wheel's, and the data dir's bin to both.",
            )
        )
    elif not at_least(version, rules["miscompile_below"]):
        findings.append(
            Finding("xla-ptxas-too-old", WARNING, f"ptxas {version} is known to miscompile XLA code", evidence,
                    fix=_ptxas_fix(ctx), detail=rules["miscompile_message"])
        )
    driver_cuda = ctx.facts.driver.cuda_driver_version
    # A driver older than TensorFlow's own CUDA major is the driver check's finding, not a ptxas one.
    driver_runs_tf = bool(driver_cuda) and (not major or vtuple(driver_cuda)[0] >= int(major))
    if driver_cuda and driver_runs_tf and vtuple(version)[:2] > vtuple(driver_cuda)[:2]:
        newer_major = vtuple(version)[0] > vtuple(driver_cuda)[0]
        driver = fixes.driver_for(version)
        findings.append(
            Finding(
                "xla-ptxas-newer-than-driver",
                ERROR if newer_major else WARNING,
                f"ptxas {version} is newer than the CUDA {driver_cuda} this driver supports",
                evidence + (f"driver {ctx.facts.driver.driver_version} supports CUDA up to {driver_cuda}",),
                fix=f"install NVIDIA driver >= {driver}  # the driver of CUDA {'.'.join(version.split('.')[:2])}" if driver else None,
                alternatives=(f"pip install 'nvidia-cuda-nvcc-cu{vtuple(driver_cuda)[0]}=={driver_cuda}.*'",),
                detail=("A driver cannot load code from a newer CUDA major (minor-version compatibility stops at the "
                        "major); XLA's output fails to load ('the provided PTX was compiled with an unsupported toolchain')."
                        if newer_major else rules["newer_than_driver_message"]),
            )
        )
    return findings


def check_nvcc_packages(ctx: Context) -> list[Finding]:
    """An nvcc wheel for another CUDA major than TensorFlow's gives XLA the wrong ptxas and libdevice."""
    xla, major = ctx.facts.xla, fixes.cuda_major(ctx)
    if not (xla.probed and major):
        return []
    findings = []
    prefix = "nvidia-cuda-nvcc-cu"
    for dist, version in sorted(ctx.facts.tensorflow.nvidia_wheels.items()):
        if dist.startswith(prefix) and dist[len(prefix):] != major:
            findings.append(_nvcc_mismatch(ctx, major, f"{dist} {version}", dist[len(prefix):],
                                           f"pip: {dist} {version}",
                                           f"pip uninstall -y {dist} && pip install '{fixes.pip_nvcc_requirement(ctx)}'"))
    for package in ctx.facts.conda.packages:
        parts = vtuple(package.version)
        own = str(parts[0]) if parts else ""
        if package.name in ("cuda-nvcc", "cuda-nvcc-tools") and own and own != major:
            findings.append(_nvcc_mismatch(ctx, major, f"conda {package.name} {package.version}", own,
                                           f"conda: {package.name} {package.version} ({package.channel})",
                                           fixes.package_fix(ctx)))
    return findings


def _nvcc_mismatch(ctx: Context, major: str, what: str, own: str, evidence: str, fix: str) -> Finding:
    """One finding for an nvcc package (pip wheel or conda) built for CUDA ``own`` where TensorFlow needs ``major``."""
    return Finding(
        "xla-nvcc-wheel-mismatch",
        WARNING if ctx.gpu_wanted else INFO,
        f"{what} is for CUDA {own}, TensorFlow {ctx.tf_version} needs CUDA {major}",
        (evidence, f"TensorFlow {ctx.tf_version} built with CUDA {ctx.cuda}"),
        fix=fix,
    )


def check_xla(ctx: Context) -> list[Finding]:
    """All XLA toolchain checks."""
    return check_libdevice(ctx) + check_ptxas(ctx) + check_nvcc_packages(ctx)
