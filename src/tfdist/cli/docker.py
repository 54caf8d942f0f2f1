"""``tfdist docker``: write a Dockerfile and .dockerignore that install a lock with hash checking."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tfdist.cli.common import emit_json, option

if TYPE_CHECKING:
    from tfdist.deploy.lock import LockInfo

IGNORE_MARK = "# Written by `tfdist docker`"


@click.command(name="docker")
@option("--tf", help="TensorFlow version (taken from the lock's header when --lock is given).")
@option("--gpu/--cpu", "gpu", default=None,
        help="GPU: NVIDIA CUDA base image + tensorflow[and-cuda]. CPU: slim Python image. Default: the lock's, else GPU.")
@option("--python", help="Python X.Y of the image (default: the lock's, else 3.11).")
@option("--lock", "lock_name", metavar="PATH",
        help="Lock file from tfdist lock, inside the build context (default: requirements.lock there).")
@option("--mirror", metavar="NAME", help="Mirror for the printed build command (--build-arg PIP_INDEX_URL=...).")
@option("--tag", default="", help="Image name in the printed commands (default: tfdist-tf<version>-<gpu|cpu>).")
@option("-o", "--output", "output_name", default="Dockerfile", show_default=True, metavar="PATH",
        help="Dockerfile to write; .dockerignore goes next to it (the build context).")
@option("--force", is_flag=True, help="Replace an existing --output (the old one is kept as NAME.bak).")
@option("--json", "as_json", is_flag=True, help="Print a versioned JSON summary.")
def command(tf: str | None, gpu: bool | None, python: str | None, lock_name: str | None, mirror: str | None,
            tag: str, output_name: str, force: bool, as_json: bool) -> int:
    """Write a Dockerfile for TensorFlow that installs the lock with --require-hashes and runs as a non-root user.

    GPU images start from NVIDIA's CUDA base image matching the TF build (no cuDNN: the pip wheels bring it), CPU
    images from python:X.Y-slim. The package index is a build argument, so one file builds with or without a mirror.
    """
    from tfdist.deploy import lock as locking
    from tfdist.deploy.dockerfile import DockerSpec, render, spec_from_lock
    from tfdist.errors import UsageError
    from tfdist.output import check_output, write_output
    from tfdist.quote import shell
    from tfdist.validate import one_line, path_text

    # Plain strings, checked here: click's own Path type stats the value, and a NUL in it raises a ValueError.
    output = Path(path_text(output_name, "--output"))
    lock = None if lock_name is None else Path(path_text(lock_name, "--lock"))
    if mirror:
        one_line(mirror, "--mirror", max_length=64, allow_outer_space=False)  # a catalog name, exactly as typed
    context = output.parent
    flavour = None if gpu is None else ("gpu" if gpu else "cpu")
    if lock is not None:
        info = _read_lock_header(lock)
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
    # Both files are checked before either is written, so a refusal writes nothing.
    check_output(output_name, force=force)
    ignore = context / ".dockerignore"
    old_ignore = _read_or_none(ignore)
    kept_ignore = old_ignore is not None and not old_ignore.startswith(IGNORE_MARK)
    backups = [write_output(output_name, files.dockerfile, force=force)]
    if not kept_ignore and old_ignore != files.dockerignore:
        # Ours (it starts with the mark) may be replaced; a changed one is still kept as .dockerignore.bak.
        backups.append(write_output(ignore, files.dockerignore, force=True, flag=".dockerignore"))
    for backup in filter(None, backups):
        print(f"tfdist docker: kept the old file as {shell(str(backup))}", file=sys.stderr)
    if kept_ignore:
        print(f"tfdist docker: warning: kept your own {shell(str(ignore))}; make sure it does not exclude "
              f"{spec.lock}", file=sys.stderr)
    if as_json:
        emit_json("docker", {"dockerfile": str(output), "dockerignore": None if kept_ignore else str(ignore),
                             "base_image": files.base_image, "tf": spec.tf, "flavour": spec.flavour,
                             "python": spec.python, "lock": spec.lock, "build": files.build_command,
                             "run": files.run_command, "lock_missing": missing_lock is not None})
        return 0
    written = f"wrote {shell(str(output))} (FROM {files.base_image})"
    print(written + ("" if kept_ignore else f" and {shell(str(ignore))}"))
    if missing_lock:
        print(f"first:  {missing_lock}")
    print(f"build:  {files.build_command}")
    print(f"run:    {files.run_command}")
    return 0


def _read_or_none(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""  # unreadable: treat as the user's own file and keep it


def _read_lock_header(lock: Path) -> "LockInfo":
    """The lock's recorded target; a missing, unreadable or malformed header is one line and exit 2."""
    from tfdist.deploy import lock as locking
    from tfdist.errors import UsageError
    from tfdist.validate import shown

    try:
        text = lock.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as failure:
        reason = getattr(failure, "strerror", None) or "not UTF-8 text"
        raise UsageError(f"cannot read the lock {shown(str(lock))}: {reason}",
                         hint="create it with tfdist lock") from None
    try:
        info = locking.parse_header(text)
        fields = (info.tf, info.flavour, info.python, info.platform, info.glibc)
    except (ValueError, KeyError, TypeError, AttributeError):  # JSON errors are ValueErrors
        info, fields = None, ()
    if info is None or not all(isinstance(field, str) for field in fields):
        raise UsageError(f"the lock {shown(str(lock))} has a malformed tfdist header",
                         hint="re-create it with tfdist lock", reference="lock-bad-header")
    return info
