"""The other direction of a library mismatch: which TensorFlow release was built for the CUDA and cuDNN an
environment already has, and which packages bring the CUDA a release needs (pip wheels or conda packages)."""

from __future__ import annotations

from tfdist.compat import tables as compat
from tfdist.compat.versions import vtuple


def _fits(built: str | None, found: str | None) -> bool:
    """A build made with ``built`` runs on libraries of version ``found``: same major, and a minor at least as new
    (when the minor of ``found`` is known)."""
    if not built or not found:
        return False
    want, have = vtuple(built), vtuple(found)
    if not want or not have or want[0] != have[0]:
        return False
    return len(have) < 2 or len(want) < 2 or want[1] <= have[1]


def releases_for(cuda: str, cudnn: str | None, python: str) -> list[str]:
    """TensorFlow minor releases (ascending) built for CUDA ``cuda`` and cuDNN ``cudnn`` that support ``python``.

    ``cudnn`` ``None`` means "not found": only the CUDA version is matched.
    """
    matches = []
    for version in compat.known_tf_versions():
        build = compat.tf_build(version)
        if not build.supports_python(python) or not _fits(build.cuda, cuda):
            continue
        if cudnn is not None and not _fits(build.cudnn, cudnn):
            continue
        matches.append(version)
    return matches


def newest_cuda_of_major(major: str) -> str | None:
    """The newest CUDA version of that major any TensorFlow release was built with (``"12"`` -> ``"12.5"``)."""
    found = [compat.tf_build(v).cuda for v in compat.known_tf_versions()]
    same = [c for c in found if c and str(vtuple(c)[0]) == major]
    return max(same, key=vtuple) if same else None


def conda_install_command(build: compat.TfBuild) -> str:
    """``conda install`` of the packages that provide the CUDA and cuDNN ``build`` was made with."""
    data = compat.load_data("cuda_libs")["conda"]
    cuda, cudnn = build.cuda or "", build.cudnn or ""
    major = str(vtuple(cuda)[0]) if cuda else ""
    packages = data["provides"].get(major)
    cudnn_major = cudnn.split(".")[0]
    cudnn_spec = f"'cudnn>={cudnn},<{int(cudnn_major) + 1}'" if cudnn_major.isdigit() else "cudnn"
    if not packages:
        return f"conda install -c {data['channel']} cudatoolkit={cuda} {cudnn_spec}"
    if packages == ["cudatoolkit"]:
        return f"conda install -c {data['channel']} cudatoolkit={cuda} {cudnn_spec}"
    return f"conda install -c {data['channel']} 'cuda-version={cuda}' {' '.join(packages)} {cudnn_spec}"
