"""``tfdist docker``: write a Dockerfile and .dockerignore that install a lock with hash checking."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tfdist.cli.common import emit_json, option

IGNORE_MARK = "# Written by `tfdist docker`"


@click.command(name="docker")
@option("--tf", help="TensorFlow version (taken from the lock's header when --lock is given).")
@option("--gpu/--cpu", "gpu", default=None,
        help="GPU: NVIDIA CUDA base image + tensorflow[and-cuda]. CPU: slim Python image. Default: the lock's, else GPU.")
@option("--python", help="Python X.Y of the image (default: the lock's, else 3.11).")
@option("--lock", "lock", type=click.Path(dir_okay=False, path_type=Path),
        help="Lock file from tfdist lock, inside the build context (default: requirements.lock there).")
@option("--mirror", metavar="NAME", help="Mirror for the printed build command (--build-arg PIP_INDEX_URL=...).")
@option("--tag", default="", help="Image name in the printed commands (default: tfdist-tf<version>-<gpu|cpu>).")
@option("-o", "--output", default="Dockerfile", show_default=True, type=click.Path(dir_okay=False, path_type=Path),
        help="Dockerfile to write; .dockerignore goes next to it (the build context).")
@option("--json", "as_json", is_flag=True, help="Print a versioned JSON summary.")
def command(tf: str | None, gpu: bool | None, python: str | None, lock: Path | None, mirror: str | None, tag: str,
            output: Path, as_json: bool) -> int:
    """Write a Dockerfile for TensorFlow that installs the lock with --require-hashes and runs as a non-root user.

    GPU images start from NVIDIA's CUDA base image matching the TF build (no cuDNN: the pip wheels bring it), CPU
    images from python:X.Y-slim. The package index is a build argument, so one file builds with or without a mirror.
    """
    from tfdist.deploy import lock as locking
    from tfdist.deploy.dockerfile import DockerSpec, render, spec_from_lock
    from tfdist.errors import UsageError

    context = output.parent
    flavour = None if gpu is None else ("gpu" if gpu else "cpu")
    if lock is not None:
        try:
            info = locking.parse_header(lock.read_text(encoding="utf-8"))
        except OSError as failure:
            raise UsageError(f"cannot read the lock {lock}: {failure.strerror}",
                             hint="create it with tfdist lock") from None
        for flag, given, recorded in (("--tf", tf, info.tf), ("--gpu/--cpu", flavour, info.flavour),
                                      ("--python", python, info.python)):
            if given is not None and given != recorded:
                raise UsageError(f"{flag} {given} contradicts the lock {lock}, made for {recorded}",
                                 hint=f"drop {flag} or re-run tfdist lock", reference="docker-lock-mismatch")
        spec = spec_from_lock(lock, context, info, tag)
        missing_lock = None
    else:
        if tf is None:
            raise UsageError("--tf is required without --lock", hint="e.g. tfdist docker --tf 2.21")
        flavour = flavour or "gpu"
        python = python or locking.DEFAULT_PYTHON
        locking.check_target(locking.LockSpec(tf=tf, flavour=flavour, python=python))
        spec = DockerSpec(tf=tf, flavour=flavour, python=python, image_tag=tag)
        missing_lock = None if (context / spec.lock).exists() else locking.command_line(
            locking.LockSpec(tf=tf, flavour=flavour, python=python), str(context / spec.lock))
    index = locking.mirror_index(mirror) if mirror else None
    files = render(spec, index, dockerfile=str(output), context=str(context))
    try:
        context.mkdir(parents=True, exist_ok=True)
        output.write_text(files.dockerfile, encoding="utf-8")
    except OSError as failure:
        raise UsageError(f"cannot write {output}: {failure.strerror}", hint="check -o") from None
    ignore = context / ".dockerignore"
    kept_ignore = ignore.exists() and not ignore.read_text(encoding="utf-8").startswith(IGNORE_MARK)
    if not kept_ignore:
        ignore.write_text(files.dockerignore, encoding="utf-8")
    if kept_ignore:
        print(f"tfdist docker: warning: kept your own {ignore}; make sure it does not exclude {spec.lock}",
              file=sys.stderr)
    if as_json:
        emit_json("docker", {"dockerfile": str(output), "dockerignore": None if kept_ignore else str(ignore),
                             "base_image": files.base_image, "tf": spec.tf, "flavour": spec.flavour,
                             "python": spec.python, "lock": spec.lock, "build": files.build_command,
                             "run": files.run_command, "lock_missing": missing_lock is not None})
        return 0
    print(f"wrote {output} (FROM {files.base_image})" + ("" if kept_ignore else f" and {ignore}"))
    if missing_lock:
        print(f"first:  {missing_lock}")
    print(f"build:  {files.build_command}")
    print(f"run:    {files.run_command}")
    return 0
