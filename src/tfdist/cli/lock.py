"""``tfdist lock``: resolve a hash-pinned TensorFlow environment for a target machine."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import click

from tfdist.cli.common import PathText, emit_json, option

# A wheel file name (PEP 427: distribution-version[-build]-python-abi-platform.whl) of tfdist.
WHEEL_NAME = re.compile(r"tfdist-[0-9][A-Za-z0-9_.+!]*(?:-[A-Za-z0-9_.+]+){3,4}\.whl")


@click.command(name="lock")
@option("--tf", required=True, help="TensorFlow version: 2.21 (newest patch) or 2.21.0.")
@option("--gpu/--cpu", "gpu", default=True, show_default=True,
        help="GPU: tensorflow[and-cuda] (CUDA/cuDNN as pip wheels). CPU: tensorflow alone (runs on the CPU; "
        "tensorflow-cpu before 2.16).")
@option("--python", default="3.11", show_default=True, help="Target Python version X.Y.")
@option("--platform", default="linux-x86_64", show_default=True,
        type=click.Choice(["linux-x86_64", "linux-aarch64"]), help="Target platform.")
@option("--glibc", default="2.28", show_default=True, help="Target glibc (manylinux level); 2.28 = Debian 10+, "
        "Ubuntu 20.04+, RHEL 8+.")
@option("--mirror", metavar="NAME", help="Resolve through this mirror (see tfdist mirror list); the lock does not "
        "name it.")
@option("-r", "--requirement", "requirements", multiple=True, type=PathText(dir_okay=False, path_type=Path),
        help="Extra requirements file to lock with TensorFlow (repeatable).")
@option("-o", "--output", default="requirements.lock", show_default=True, type=PathText(dir_okay=False),
        help="Lock file to write ('-' for stdout).")
@option("--conda", "conda", type=PathText(dir_okay=False), metavar="ENVIRONMENT_YML",
        help="Also write a conda environment.yml with this Python and the lock as its pip section.")
@option("--tfdist-wheel", type=PathText(dir_okay=False, exists=True, path_type=Path),
        help="Lock tfdist from this wheel (make dist) and copy it next to the lock. Default: dist/tfdist-<version>-"
        "*.whl here if present, else tfdist from the index.")
@option("--force", is_flag=True, help="Replace an existing -o/--conda file (the old one is kept as NAME.bak).")
@option("--no-tfdist", is_flag=True, help="Leave tfdist itself out of the lock.")
@option("--json", "as_json", is_flag=True, help="Print a versioned JSON summary.")
def command(tf: str, gpu: bool, python: str, platform: str, glibc: str, mirror: str | None,
            requirements: tuple[Path, ...], output: str, conda: str | None, tfdist_wheel: Path | None,
            force: bool, no_tfdist: bool, as_json: bool) -> int:
    """Pin TensorFlow and everything it needs, with hashes, for the target Python and platform.

    Resolves with uv's pip compile; impossible combinations (a Python the TF release has no wheels for, a glibc
    below its wheels' floor) are refused with the reason. Install the result with
    pip install --require-hashes -r requirements.lock.
    """
    from tfdist.deploy.lock import (LockSpec, check_target, default_tfdist_wheel, mirror_index, parse_header,
                                    render_conda, resolve)
    from tfdist import quote
    from tfdist.errors import UsageError
    from tfdist.output import check_output, write_output

    if as_json and output == "-":
        raise click.UsageError("--json needs -o FILE: with -o - the lock itself goes to stdout")
    if tfdist_wheel is not None and no_tfdist:
        raise click.UsageError("--tfdist-wheel and --no-tfdist contradict each other; give one")
    if tfdist_wheel is not None and output == "-":
        raise click.UsageError("--tfdist-wheel needs -o FILE: the wheel is copied next to the lock")
    if tfdist_wheel is None and not no_tfdist and output != "-":
        tfdist_wheel = default_tfdist_wheel(Path.cwd())
        if tfdist_wheel is not None:
            print(f"tfdist lock: locking tfdist from {tfdist_wheel} (built from this checkout)", file=sys.stderr)
    if tfdist_wheel is not None and not WHEEL_NAME.fullmatch(tfdist_wheel.name):
        # The name becomes a requirement line (./NAME.whl) and a Dockerfile COPY source: wheel grammar only.
        # The path itself is one line of printable text (PathText checked it), so it is shown as typed.
        raise UsageError(f"--tfdist-wheel {tfdist_wheel} is not a tfdist wheel (tfdist-VERSION-TAGS.whl)",
                         hint="build it with make dist", reference="invalid-value")
    index = mirror_index(mirror) if mirror else None
    spec = LockSpec(tf=tf, flavour="gpu" if gpu else "cpu", python=python, platform=platform, glibc=glibc,
                    mirror_index=index, extra_requirements=tuple(requirements), tfdist_wheel=tfdist_wheel,
                    include_tfdist=not no_tfdist)
    # Both outputs are checked before uv runs, so a refusal writes nothing.
    outputs = ([] if output == "-" else [(output, "--output")]) + ([(conda, "--conda")] if conda else [])
    for target, flag in outputs:
        check_output(target, force=force, flag=flag)
    check_target(spec)  # before the progress line, which shows the target
    name = "requirements.lock" if output == "-" else Path(output).name
    print(f"tfdist lock: resolving TensorFlow {tf} ({spec.flavour}) for Python {python} on {spec.uv_platform}"
          + (f" through mirror {mirror}" if mirror else ""), file=sys.stderr)
    result = resolve(spec, output_name=name)
    try:
        if output == "-":
            sys.stdout.write(result.text)
        for target, flag in outputs:
            text = result.text if flag == "--output" else render_conda(result.text, parse_header(result.text), name)
            backup = write_output(target, text, force=force, flag=flag)
            if backup is not None:
                print(f"tfdist lock: kept the old file as {quote.shell(str(backup))}", file=sys.stderr)
        if tfdist_wheel is not None:
            _copy_next_to(tfdist_wheel, Path(output).resolve().parent)
    except OSError as failure:
        raise UsageError(f"cannot write {failure.filename}: {failure.strerror}", hint="check -o and --conda") from None
    from tfdist.deploy.lock import tf_distribution

    tf_dist = tf_distribution(spec)
    if as_json:
        emit_json("lock", {"output": output, "conda": conda, "tf": tf, "flavour": spec.flavour, "python": python,
                           "platform": spec.uv_platform, "packages": len(result.pins), "pins": result.pins,
                           "seconds": round(result.seconds, 2)})
        return 0
    out = sys.stderr if output == "-" else sys.stdout
    print(f"locked {len(result.pins)} packages ({tf_dist} {result.pins.get(tf_dist, '?')}) "
          f"in {result.seconds:.1f} s", file=out)
    if output != "-":
        print(f"wrote {quote.shell(output)}" + (f" and {quote.shell(conda)}" if conda else ""), file=out)
        print(f"install: pip install --require-hashes -r {quote.shell(output)}", file=out)
    return 0


def _copy_next_to(wheel: Path, folder: Path) -> None:
    """The lock names the wheel as ./NAME.whl: it must lie in the lock's folder (tfdist docker copies both)."""
    import shutil

    target = folder / wheel.name
    if target.resolve() != wheel.resolve():
        shutil.copyfile(wheel, target)
