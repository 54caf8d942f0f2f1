"""The exact commands that give XLA a libdevice and a ptxas on this machine: an ``XLA_FLAGS`` line naming a folder
that exists here and holds the file, the conda copy recipe, or the package for TensorFlow's CUDA major. Pure: they
read the probe's facts, they run nothing."""

from __future__ import annotations

import os
import shlex
from shlex import quote

from tfdist.compat import tables as compat
from tfdist.compat.versions import at_least, vtuple
from tfdist.doctor.context import Context
from tfdist.doctor.facts import CudaRoot

DATA_DIR_FLAG = "--xla_gpu_cuda_data_dir"
_CONDA_TF = ("tensorflow", "tensorflow-base", "tensorflow-gpu")


def cuda_major(ctx: Context) -> str:
    """TensorFlow's CUDA major (``"12"``), ``""`` when unknown."""
    parts = vtuple(ctx.cuda)
    return str(parts[0]) if parts else ""


def xla_flags_line(ctx: Context, data_dir: str) -> str:
    """``export XLA_FLAGS=...`` with ``--xla_gpu_cuda_data_dir`` set to ``data_dir`` and the other flags kept."""
    words = []
    raw = ctx.facts.xla.xla_flags or ""
    try:
        old = shlex.split(raw)
    except ValueError:
        old = raw.split()
    skip_next = False
    for word in old:
        if skip_next:
            skip_next = False
            continue
        if word == DATA_DIR_FLAG:
            skip_next = True
            continue
        if not word.startswith(DATA_DIR_FLAG + "="):
            words.append(word)
    words.append(f"{DATA_DIR_FLAG}={data_dir}")
    return "export XLA_FLAGS=" + quote(" ".join(words))


def conda_tf(ctx: Context) -> bool:
    """TensorFlow itself came from conda (its packages find the prefix differently from pip's wheel)."""
    return any(p.name in _CONDA_TF for p in ctx.facts.conda.packages)


def pip_nvcc_requirement(ctx: Context) -> str:
    """``nvidia-cuda-nvcc-cu12==12.5.82`` for the installed release (the ``[and-cuda]`` pin when there is one)."""
    major = cuda_major(ctx) or "12"
    dist = f"nvidia-cuda-nvcc-cu{major}"
    pin = ctx.build.and_cuda_pins.get(dist) if ctx.build else None
    if not pin and major == "11":
        pin = compat.tf_build("2.14").and_cuda_pins.get(dist)  # the only cu11 nvcc pin TensorFlow ever made
    return f"{dist}{pin or ''}"


def usable_roots(ctx: Context, *, want: str) -> list[CudaRoot]:
    """Folders on this machine that hold ``want`` (``libdevice`` or ``ptxas``), best first: TF's CUDA major, then
    the ones holding both files. The root XLA already uses is left out."""
    xla = ctx.facts.xla
    pool = [r for r in xla.roots[1:] if r.path != "."] + list(xla.elsewhere)
    if xla.data_dir:
        pool = [r for r in pool if os.path.realpath(r.path) != os.path.realpath(xla.data_dir)]
    have = [r for r in pool if getattr(r, want)]
    major = cuda_major(ctx)

    def rank(root: CudaRoot) -> tuple[int, int]:
        same_major = f"cuda-{major}." in root.path or f"cu{major}" in root.path or "cuda_nvcc" in root.path
        return (0 if same_major else 1, 0 if (root.libdevice and root.ptxas) else 1)

    unique: dict[str, CudaRoot] = {}
    for root in sorted(have, key=rank):
        unique.setdefault(os.path.realpath(root.path), root)
    return list(unique.values())


def copy_recipe(ctx: Context, loose: str) -> str:
    """TensorFlow's own conda recipe for a ``lib/libdevice.10.bc`` that is not in an ``nvvm/libdevice`` folder:
    copy it there and point XLA at the folder above (tensorflow/tensorflow#58681, TF install guide)."""
    base = os.path.dirname(loose)
    target = os.path.join(base, "nvvm", "libdevice")
    return f"mkdir -p {quote(target)} && cp {quote(loose)} {quote(target + '/')} && {xla_flags_line(ctx, base)}"


def link_recipe(ctx: Context, loose: str) -> str:
    """For a libdevice.10.bc outside any CUDA root (Debian's toolkit folder): link it into the environment's
    prefix as ``nvvm/libdevice`` and point XLA there."""
    prefix = ctx.facts.system.environment_prefix or ctx.facts.conda.prefix or os.path.expanduser("~/.cuda-xla")
    target = os.path.join(prefix, "nvvm", "libdevice")
    return f"mkdir -p {quote(target)} && ln -sf {quote(loose)} {quote(target + '/')} && {xla_flags_line(ctx, prefix)}"


def package_fix(ctx: Context) -> str:
    """Install the package that brings libdevice and ptxas for TensorFlow's CUDA major, the way CUDA came here."""
    data = compat.load_data("xla_toolchain")["conda_recipe"]
    major = cuda_major(ctx)
    conda = ctx.facts.conda
    version = ctx.tf_version or "0"
    conda_cuda = any(p.name == "cudatoolkit" or p.name.startswith("cuda-") for p in conda.packages)
    if conda.prefix and (conda_tf(ctx) or conda_cuda):
        if major == "11":
            # TensorFlow's own recipe: the nvidia channel's cuda-nvcc puts libdevice.10.bc in lib/; copy it.
            lib = os.path.join(conda.prefix, "lib")
            return f"{data['nvcc_cuda11']} && " + copy_recipe(ctx, os.path.join(lib, "libdevice.10.bc"))
        if major == "12":
            # conda-forge's cuda-nvcc-tools puts nvvm/libdevice under the prefix, which XLA searches from 2.21 on.
            command = f"{data['nvcc_cuda12']} 'cuda-version={'.'.join(ctx.cuda.split('.')[:2]) if ctx.cuda else major}'"
            prefix_searched = any(r.path == os.path.normpath(conda.prefix) for r in ctx.facts.xla.roots)
            return command if prefix_searched else command + " && " + xla_flags_line(ctx, conda.prefix)
    if major and int(major) < 11:
        cuda = ctx.build.cuda if ctx.build and ctx.build.cuda else (ctx.cuda or major)
        folder = f"/usr/local/cuda-{'.'.join(cuda.split('.')[:2])}"
        return f"install the CUDA {cuda} toolkit into {folder} (it has nvvm/libdevice and bin/ptxas; TensorFlow {version} looks there)"
    command = f"pip install {quote(pip_nvcc_requirement(ctx))}"
    if not at_least(version, "2.14") and ctx.facts.tensorflow.package_dir:
        # Before 2.14 XLA does not look next to TensorFlow for the wheel: name its folder.
        wheel = os.path.normpath(os.path.join(ctx.facts.tensorflow.package_dir, "..", "nvidia", "cuda_nvcc"))
        command += " && " + xla_flags_line(ctx, wheel)
    return command


def keras_workaround(ctx: Context) -> str:
    """Train without XLA when no toolchain can be installed (the caveat depends on the Keras the run uses)."""
    data = compat.load_data("xla_toolchain")["workaround"]
    keras = ctx.xla_exposure.keras.major if ctx.xla_exposure else 2
    return data["keras3"] if keras == 3 else data["keras2"]


def driver_for(cuda: str) -> str | None:
    """The toolkit driver for ``cuda`` (what PTX from that ptxas needs), ``None`` when unknown."""
    from tfdist.errors import UsageError

    try:
        return compat.min_driver_for_cuda(".".join(str(p) for p in vtuple(cuda)[:2]))
    except UsageError:
        return None
