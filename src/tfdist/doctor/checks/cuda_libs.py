"""The CUDA libraries TensorFlow opens that it cannot find (cause 2): each one named with what was found instead
(version, path, owning package) against what TensorFlow needs, and both ways out: bring the libraries this
TensorFlow needs, or install the TensorFlow release built for the libraries that are there."""

from __future__ import annotations

import os
from shlex import quote

from tfdist.compat import tables as compat
from tfdist.doctor.context import Context
from tfdist.doctor.facts import Library
from tfdist.doctor.findings import ERROR, Finding
from tfdist.doctor.matching import conda_install_command, releases_for
from tfdist.doctor.recommend import install_command
from tfdist.compat.versions import vtuple
from tfdist.frozen import frozen

_LD_APPEND = "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"


def export_ld_path(folders: list[str]) -> str:
    """``export LD_LIBRARY_PATH=<folders>${LD_LIBRARY_PATH:+:...}``, the folders quoted for the shell."""
    return "export LD_LIBRARY_PATH=" + quote(":".join(folders)) + _LD_APPEND


def stem(name: str) -> str:
    """``libcudart.so.11.0`` -> ``libcudart``."""
    return name.split(".so", 1)[0]


def describe(lib: Library) -> str:
    """``libcudart.so.11.0 11.8.89 at /env/lib/libcudart.so.11.0 (conda cudatoolkit 11.8.0)``."""
    version = f" {lib.version}" if lib.version and lib.version != lib.name.partition(".so.")[2] else ""
    return f"{lib.name}{version} at {lib.path} ({owner_of(lib)})"


def owner_of(lib: Library) -> str:
    """Who installed ``lib``, or how it was found when no package record names an owner."""
    if lib.owner:
        return lib.owner
    how = {"ld-cache": "ldconfig cache", "LD_LIBRARY_PATH": "LD_LIBRARY_PATH", "conda": "conda prefix"}
    return f"{how.get(lib.origin, lib.origin)}, no package record"


def _is_soname_entry(name: str) -> bool:
    return name.count(".so.") == 1 and name.split(".so.")[1].count(".") <= 1


@frozen
class Found:
    """What the environment has for one library TensorFlow needs."""

    needed: str  # the soname TensorFlow opens
    hidden: Library | None  # that soname exists but the loader cannot see it
    other: Library | None  # another major of the same library (libcudart.so.13 where .so.12 is needed)


def _lookup(ctx: Context, soname: str) -> Found:
    libs = [lib for lib in ctx.facts.libraries.libraries if _is_soname_entry(lib.name)]
    hidden = next((lib for lib in libs if lib.name == soname and not lib.origin.startswith("pip")), None)
    others = [lib for lib in libs if stem(lib.name) == stem(soname) and lib.name != soname]
    # Prefer what the loader sees, then the newest major.
    others.sort(key=lambda lib: (not lib.on_loader_path, [-p for p in vtuple(lib.name.partition(".so.")[2])]))
    return Found(soname, hidden, others[0] if others else None)


def _found_version(lib: Library | None, ctx: Context, conda_names: tuple[str, ...]) -> str | None:
    """MAJOR.MINOR of what was found: the file's version, else the owning conda package's, else the SONAME major."""
    if lib is None:
        return None
    for name in conda_names:
        package = ctx.facts.conda.package(name)
        if package and lib.owner and f"conda {package.name} " in lib.owner:
            return ".".join(str(p) for p in vtuple(package.version)[:2])
    parts = vtuple(lib.version or lib.name.partition(".so.")[2])
    return ".".join(str(p) for p in parts[:2]) if parts else None


def check_missing_libraries(ctx: Context, missing: dict[str, str]) -> list[Finding]:
    """One finding for the libraries of ``missing`` (component -> soname), or none when nothing is missing."""
    if not missing:
        return []
    found = {comp: _lookup(ctx, so) for comp, so in missing.items()}
    places = "LD_LIBRARY_PATH, the ldconfig cache" + (" or site-packages/nvidia" if ctx.pip_libs_visible else "")
    evidence = []
    for item in found.values():
        if item.hidden is not None:
            evidence.append(
                f"{item.needed}: present at {item.hidden.path} ({owner_of(item.hidden)}) but not on the loader path"
            )
        elif item.other is not None:
            evidence.append(f"{item.needed}: not found; found {describe(item.other)}")
        else:
            evidence.append(f"{item.needed}: not found on {places}")
    build = ctx.build
    need_cuda = build.cuda if build else ctx.cuda
    need_cudnn = build.cudnn if build else ctx.cudnn_major
    evidence.append(
        f"TensorFlow {ctx.tf_version} was built with CUDA {need_cuda} and cuDNN {need_cudnn}: "
        f"it opens {', '.join(missing.values())}"
    )
    hidden_dirs = sorted({os.path.dirname(f.hidden.path) for f in found.values() if f.hidden is not None})
    others = {comp: f.other for comp, f in found.items() if f.other is not None and f.hidden is None}
    if hidden_dirs and not others:
        return [_hidden_finding(ctx, missing, hidden_dirs, evidence)]
    if others:
        return [_mismatch_finding(ctx, missing, others, evidence)]
    return [
        Finding(
            "cuda-libraries-missing",
            ERROR,
            f"{len(missing)} CUDA librar{'y' if len(missing) == 1 else 'ies'} TensorFlow {ctx.tf_version} opens "
            "cannot be found: " + ", ".join(missing.values()),
            tuple(evidence),
            fix=_bring_libraries(ctx),
            alternatives=() if _bring_libraries(ctx).startswith("conda ") else _conda_alternative(ctx),
            detail="TensorFlow logs 'Could not load dynamic library ...' and 'Cannot dlopen some GPU libraries ... "
            "Skipping registering GPU devices', then runs on the CPU.",
        )
    ]


def _hidden_finding(ctx: Context, missing: dict[str, str], dirs: list[str], evidence: list[str]) -> Finding:
    conda = ctx.facts.conda.prefix
    alternatives: tuple[str, ...] = ()
    stale = [
        s for s in ctx.facts.conda.activation_scripts
        if not s.applied and all(os.path.normpath(d) in s.folders for d in dirs)
    ]
    if stale:
        fix = f"conda deactivate && conda activate {quote(conda or '')}"
        alternatives = (export_ld_path(dirs) + "  # this shell only",)
        detail = f"{stale[0].path} adds them to LD_LIBRARY_PATH, but only when the environment is activated."
    elif conda and all(d.startswith(conda) for d in dirs):
        folder = quote(f"{conda}/etc/conda/activate.d")
        script = quote(f"{conda}/etc/conda/activate.d/env_vars.sh")
        fix = (
            f"mkdir -p {folder} && echo 'export LD_LIBRARY_PATH=$CONDA_PREFIX/lib"
            f"{_LD_APPEND}' >> {script} && conda deactivate && conda activate {quote(conda)}"
        )
        alternatives = (export_ld_path(dirs) + "  # this shell only",)
        detail = (
            "TensorFlow from pip does not look in the conda environment's lib folder; an activation script puts "
            "it on LD_LIBRARY_PATH each time the environment is activated."
        )
    else:
        fix = export_ld_path(dirs)
        detail = "The libraries are installed but outside the loader's search path."
    return Finding(
        "cuda-libraries-missing",
        ERROR,
        f"{len(missing)} CUDA librar{'y' if len(missing) == 1 else 'ies'} TensorFlow {ctx.tf_version} opens "
        "are installed but not on the loader path: " + ", ".join(missing.values()),
        tuple(evidence),
        fix=fix,
        alternatives=alternatives,
        detail=detail,
    )


def _mismatch_finding(
    ctx: Context, missing: dict[str, str], others: dict[str, Library], evidence: list[str]
) -> Finding:
    cudart = others.get("cudart") or next((lib for c, lib in others.items() if c != "cudnn"), None)
    cudnn = others.get("cudnn")
    # What the loader already resolves counts too: the CUDA runtime TF gets when only cuDNN is off.
    env_cudart = cudart or next((lib for lib in ctx.loader.values() if stem(lib.name) == "libcudart"), None)
    env_cudnn = cudnn or next((lib for lib in ctx.loader.values() if stem(lib.name) == "libcudnn"), None)
    found_cuda = _found_version(env_cudart, ctx, ("cudatoolkit", "cuda-cudart", "cuda-version"))
    found_cudnn = _found_version(env_cudnn, ctx, ("cudnn", "libcudnn"))
    build = ctx.build
    need_cuda = build.cuda if build else ctx.cuda
    need_cudnn = build.cudnn if build else ctx.cudnn_major
    only_cudnn = set(missing) == {"cudnn"}
    have = []
    if cudart is not None:
        have.append(f"CUDA {found_cuda or cudart.name.partition('.so.')[2]}")
    if cudnn is not None:
        have.append(f"cuDNN {found_cudnn or cudnn.name.partition('.so.')[2]}")
    owners = sorted({owner_of(lib) for lib in others.values()})
    title = (
        f"TensorFlow {ctx.tf_version} needs "
        + (f"cuDNN {str(need_cudnn).split('.')[0]}" if only_cudnn else f"CUDA {vtuple(need_cuda or '0')[0]}"
           + (f" / cuDNN {str(need_cudnn).split('.')[0]}" if need_cudnn else ""))
        + f"; this environment has {' / '.join(have)} ({'; '.join(owners)})"
    )
    # The other direction: the release built for what is here.
    python = ctx.facts.system.python_version
    alternatives = []
    matching: list[str] = []
    if found_cuda:
        matching = releases_for(found_cuda, found_cudnn, python)
    if matching:
        newest = matching[-1]
        pip_owned = all((lib.origin or "").startswith("pip") for lib in others.values())
        gpu_extra = pip_owned and vtuple(newest) >= (2, 14)
        alternatives.append(
            install_command(newest, gpu=gpu_extra or vtuple(newest) < (2, 14))
            + f"  # TensorFlow {newest} was built for CUDA {compat.tf_build(newest).cuda} / "
            f"cuDNN {compat.tf_build(newest).cudnn}, which this environment has"
        )
    detail = (
        "TensorFlow opens libraries by SONAME (major version): a different major is a missing library to it. "
        "Either bring the libraries it needs (the fix), or install the release built for the ones here."
    )
    if not matching:
        here = [f"CUDA {found_cuda}" if found_cuda else None, f"cuDNN {found_cudnn}" if found_cudnn else None]
        detail += (
            f" No TensorFlow release was built for {' / '.join(h for h in here if h) or 'these libraries'}: "
            "the newest is built for CUDA "
            f"{compat.tf_build(compat.known_tf_versions()[-1]).cuda}."
        )
    fix = _bring_libraries(ctx, others)
    if not fix.startswith("conda "):
        alternatives += list(_conda_alternative(ctx))
    return Finding(
        "cudnn-major-mismatch" if only_cudnn else "cuda-major-mismatch",
        ERROR,
        title,
        tuple(evidence),
        fix=fix,
        alternatives=tuple(dict.fromkeys(alternatives)),
        detail=detail,
    )


def _conda_owned(libs: dict[str, Library] | None) -> bool:
    return any((lib.owner or "").startswith("conda ") for lib in (libs or {}).values())


def _bring_libraries(ctx: Context, others: dict[str, Library] | None = None) -> str:
    """Bring the CUDA libraries this TensorFlow needs, in the terms of the environment that lacks them."""
    build = ctx.build
    # conda terms when conda owns what is there, or when this conda environment must bring a pre-2.14 CUDA itself.
    legacy_in_conda = ctx.facts.system.environment == "conda" and build is not None and vtuple(build.version) < (2, 14)
    if build is not None and ctx.facts.conda.prefix and (_conda_owned(others) or legacy_in_conda):
        return conda_install_command(build)
    if vtuple(ctx.tf_version or "")[:2] >= (2, 14):
        return f"pip install 'tensorflow[and-cuda]=={ctx.tf_version}'"
    cuda, cudnn = (build.cuda, build.cudnn) if build else (ctx.cuda, ctx.cudnn_major)
    return f"install CUDA {cuda} and cuDNN {cudnn}, then add their lib64 to LD_LIBRARY_PATH"


def _conda_alternative(ctx: Context) -> tuple[str, ...]:
    build = ctx.build
    if build is None or ctx.facts.system.environment != "conda" or not build.cuda:
        return ()
    return (conda_install_command(build) + "  # the CUDA libraries as conda packages",)
