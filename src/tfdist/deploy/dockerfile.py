"""Write a Dockerfile (and its ``.dockerignore``) that installs a ``tfdist lock`` file with hash checking.

GPU images start from NVIDIA's CUDA *base* image for the CUDA the TF build was made with: it declares that CUDA
(so the NVIDIA container toolkit refuses a host driver that is too old) but has no cuDNN, which the
``tensorflow[and-cuda]`` wheels bring. CPU images start from the slim Python image. The package index is a build
argument, ``PIP_INDEX_URL``, so the same file builds with and without a mirror; the hashes in the lock make the
result identical either way. The image runs as an unprivileged user.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from packaging.version import Version

from tfdist import quote, validate
from tfdist.deploy.lock import DEFAULT_PYTHON, Flavour, LockInfo, load_tf_build
from tfdist.errors import UsageError

# A COPY source in shell form is split at white space and expanded ($VAR), and a leading "--" makes it a flag
# (--from=..., --chown=...): these characters need no quoting, and the first may not be a '-'.
_COPY_PATH = re.compile(r"[A-Za-z0-9._+@=,][A-Za-z0-9._+@=,-]*(?:/[A-Za-z0-9._+@=,-]+)*")


@dataclass(frozen=True)
class DockerSpec:
    """What to generate.

    Args:
        tf: TensorFlow version the lock pins.
        flavour: ``gpu`` or ``cpu``.
        python: the lock's target Python ``X.Y``.
        lock: path of the lock inside the build context, as written in ``COPY`` (POSIX separators).
        lock_glibc: the glibc level the lock was resolved for (checked against the base image).
        image_tag: name used in the printed ``docker build``/``docker run`` commands.
        tfdist_wheel: path inside the build context of the tfdist wheel the lock installs (``./NAME.whl`` in it).
    """

    tf: str
    flavour: Flavour = "gpu"
    python: str = DEFAULT_PYTHON
    lock: str = "requirements.lock"
    lock_glibc: str = "2.28"
    image_tag: str = ""
    tfdist_wheel: str | None = None

    def __post_init__(self) -> None:
        # Every field lands in the Dockerfile or in a printed command: check each against its consumer's grammar.
        validate.version(self.tf, "--tf")
        validate.version(self.python, "--python")
        validate.version(self.lock_glibc, "the lock's glibc")
        if self.flavour not in ("gpu", "cpu"):
            raise validate.refuse("--gpu/--cpu", str(self.flavour), "is neither gpu nor cpu", "use --gpu or --cpu")
        if not _COPY_PATH.fullmatch(self.lock) or ".." in self.lock.split("/"):
            raise validate.refuse("--lock", self.lock, "cannot be named in a COPY instruction",
                                  "rename the lock (letters, digits, '.', '_', '-', '+', '@', '=', ',') "
                                  "inside the build context")
        if self.tfdist_wheel is not None and (not _COPY_PATH.fullmatch(self.tfdist_wheel)
                                              or ".." in self.tfdist_wheel.split("/")):
            raise validate.refuse("the lock's tfdist wheel", self.tfdist_wheel, "cannot be named in a COPY instruction",
                                  "rebuild the wheel (make dist) and lock again")
        if self.image_tag:
            validate.image_reference(self.image_tag, "--tag", allow_digest=False)

    @property
    def tag(self) -> str:
        """The image name used in the printed commands."""
        return self.image_tag or f"tfdist-tf{self.tf}-{self.flavour}"


@dataclass(frozen=True)
class DockerFiles:
    """The generated texts and the commands to use them."""

    dockerfile: str
    dockerignore: str
    base_image: str
    build_command: str
    run_command: str


@lru_cache(maxsize=1)
def _images() -> dict[str, Any]:
    text = resources.files("tfdist.deploy").joinpath("templates/docker/base_images.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _template(name: str) -> Template:
    return Template(resources.files("tfdist.deploy").joinpath(f"templates/docker/{name}").read_text("utf-8"))


def spec_from_lock(lock_path: Path, context_dir: Path, info: LockInfo, image_tag: str = "") -> DockerSpec:
    """A :class:`DockerSpec` for an existing lock, whose path must lie inside the build context.

    Raises:
        UsageError: the lock is outside the directory the Dockerfile is written to.
    """
    relative = os.path.relpath(Path(lock_path).resolve(), Path(context_dir).resolve())
    if relative.startswith(".."):
        raise UsageError(
            f"the lock {lock_path} is outside the build context {context_dir}",
            hint="write the Dockerfile next to the lock (-o DIR/Dockerfile) or copy the lock there",
            reference="docker-lock-outside-context",
        )
    wheel = None
    if info.tfdist_wheel:
        wheel = (Path(relative).parent / info.tfdist_wheel).as_posix()
        if not (Path(context_dir) / wheel).is_file():
            raise UsageError(f"the lock {lock_path} installs tfdist from {info.tfdist_wheel}, which is not next to it",
                             hint="put the wheel next to the lock, or re-run tfdist lock --tfdist-wheel WHEEL",
                             reference="docker-wheel-missing")
    return DockerSpec(tf=info.tf, flavour=info.flavour, python=info.python, lock=Path(relative).as_posix(),
                      lock_glibc=info.glibc, image_tag=image_tag, tfdist_wheel=wheel)


def _minor(version: str) -> str:
    release = Version(version).release
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def _check_glibc(spec: DockerSpec, system: str) -> None:
    have = _images()["glibc"][system]
    if Version(spec.lock_glibc) > Version(have):
        raise UsageError(
            f"the lock targets glibc {spec.lock_glibc}, but the {system} base image has glibc {have}",
            hint=f"re-run tfdist lock with --glibc {have} or lower",
            reference="docker-glibc-mismatch",
        )


def gpu_base(spec: DockerSpec) -> tuple[str, dict[str, Any]]:
    """The CUDA base image for the TF build's CUDA and the lock's Python, with how to install that Python.

    Raises:
        UsageError: no CUDA image for that CUDA, or no Ubuntu release shipping that Python.
    """
    build = load_tf_build(spec.tf)
    images = _images()
    cuda = _minor(str(build.cuda))
    entry = images["cuda_tags"].get(cuda)
    if entry is None:
        raise UsageError(f"no CUDA base image is known for CUDA {cuda} (TensorFlow {spec.tf})",
                         hint="use TensorFlow 2.14 or newer", reference="docker-no-cuda-image")
    python = images["ubuntu_python"].get(_minor(spec.python))
    if python is None:
        raise UsageError(
            f"no Ubuntu release with a CUDA base image ships Python {spec.python}",
            hint="lock for Python " + " or ".join(images["ubuntu_python"]) + " (tfdist lock --python ...)",
            reference="docker-python-unavailable",
        )
    if python["system"] not in entry["systems"]:
        raise UsageError(
            f"CUDA {entry['tag']} has no {python['system']} base image, which Python {spec.python} needs",
            hint="lock for Python " + " or ".join(p for p, v in images["ubuntu_python"].items()
                                                  if v["system"] in entry["systems"]),
            reference="docker-python-unavailable",
        )
    _check_glibc(spec, python["system"])
    return f"{images['cuda_repository']}:{entry['tag']}-base-{python['system']}", python


def render(spec: DockerSpec, mirror_index: str | None = None, *, dockerfile: str = "Dockerfile",
           context: str = ".") -> DockerFiles:
    """Render the Dockerfile and ``.dockerignore`` and the commands that build and run the image.

    Args:
        spec: what to build.
        mirror_index: a mirror's simple index; it appears only in the printed build command.
        dockerfile: the Dockerfile's path as the user will type it (``-f`` is added unless it is the default).
        context: the build context directory as the user will type it.

    Raises:
        UsageError: see :func:`gpu_base`.
    """
    install_files = spec.lock + (f" {spec.tfdist_wheel}" if spec.tfdist_wheel else "")
    common = {"tf": spec.tf, "python": spec.python, "lock": spec.lock, "image_tag": spec.tag,
              "install_files": install_files, "lock_name": Path(spec.lock).name}
    if spec.flavour == "gpu":
        base, python = gpu_base(spec)
        cuda = _minor(str(load_tf_build(spec.tf).cuda))
        text = _template("Dockerfile.gpu.tmpl").substitute(
            common, base_image=base, cuda=cuda, apt_packages=" ".join(python["packages"]),
            interpreter=python["interpreter"])
        run = f"docker run --rm --gpus all {quote.shell(spec.tag)}"
    else:
        _check_glibc(spec, "bookworm")
        base = _images()["cpu_image"].format(python=_minor(spec.python))
        text = _template("Dockerfile.cpu.tmpl").substitute(common, base_image=base)
        run = f"docker run --rm {quote.shell(spec.tag)}"
    build = f"docker build -t {quote.shell(spec.tag)}"
    if Path(dockerfile) != Path(context) / "Dockerfile":
        build += f" -f {quote.shell(dockerfile)}"
    if mirror_index:
        build += f" --build-arg PIP_INDEX_URL={quote.shell(mirror_index)}"
    ignore = _template("dockerignore.tmpl").substitute()
    return DockerFiles(text, ignore, base, f"{build} {quote.shell(context)}", run)
