"""Helpers shared by the checks."""

from __future__ import annotations

from tfdist.compat import tables as compat
from tfdist.doctor.context import Context
from tfdist.doctor.findings import ERROR, INFO
from tfdist.doctor.recommend import install_command, recommend
from tfdist.compat.versions import minor_of
from tfdist.errors import UsageError


def gpu_severity(ctx: Context) -> str:
    """Problems that only matter for the GPU are errors when a GPU is there or asked for, else information."""
    return ERROR if ctx.gpu_wanted else INFO


def reinstall_command(ctx: Context, *, gpu: bool) -> str:
    """The install command for the installed TensorFlow release (or the recommended one when that release cannot
    be installed as asked: unknown to the data, or a release whose ``[and-cuda]`` is broken)."""
    version = ctx.tf_version
    broken = compat.load_data("cuda_libs")["pip_cuda_path_broken"]["versions"]
    if gpu and version and minor_of(version) in broken:
        version = recommend(ctx.facts).version or version  # that release's [and-cuda] does not work: move on
    try:
        return install_command(version or "", gpu=gpu)
    except UsageError:
        rec = recommend(ctx.facts).version
        return install_command(rec, gpu=gpu) if rec else "pip install 'tensorflow[and-cuda]'"
