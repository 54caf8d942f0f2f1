"""``tfdist setup-gpu``: write a script that adds NVIDIA's apt repository and a fitting driver branch."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tfdist.cli.common import emit_json, option
from tfdist.deploy.setup_gpu import DEFAULT_TF, SetupGpuSpec, render_script, supported_systems
from tfdist.output import check_output, write_output
from tfdist.quote import shell
from tfdist.status import ExitStatus


@click.command(name="setup-gpu")
@option("--os", "os", required=True, type=click.Choice(supported_systems()),
        help="The machine's operating system; the script refuses to run on any other.")
@option("--tf", default=DEFAULT_TF, show_default=True, help="TensorFlow version whose CUDA the driver must run.")
@option("--driver", type=click.IntRange(min=1, max=9999), metavar="BRANCH",
        help="Driver branch (e.g. 570) instead of the one picked from the compatibility data.")
@option("-o", "--output", default="setup_gpu.sh", show_default=True, help="Script to write ('-' for stdout).")
@option("--force", is_flag=True, help="Replace an existing --output (the old one is kept as NAME.bak).")
@option("--json", "as_json", is_flag=True, help="Print the choice as versioned JSON.")
def command(os: str, tf: str, driver: int | None, output: str, force: bool, as_json: bool) -> int:
    """Write a script that installs NVIDIA's CUDA repository (cuda-keyring) and a driver branch for TF.

    The script installs no CUDA toolkit or cuDNN: tensorflow[and-cuda] brings them as pip wheels. It checks it runs
    as root on the stated OS, prints its plan, has a --dry-run mode and skips what is already installed.
    """
    if as_json and output == "-":
        raise click.UsageError("--json needs -o FILE: with -o - the script itself goes to stdout")
    name = "setup_gpu.sh" if output == "-" else Path(output).name
    if output != "-":
        check_output(output, force=force)
    text, choice = render_script(SetupGpuSpec(os=os, tf=tf, driver=driver, script_name=name))
    container = _container()
    backup = None
    if output == "-":
        sys.stdout.write(text)
    else:
        backup = write_output(output, text, force=force, mode=0o755)
    info = sys.stderr if output == "-" or as_json else sys.stdout
    shown = shell(output)
    if as_json:
        emit_json("setup_gpu", {"os": os, "tf": tf, "driver_branch": choice.branch, "package": choice.package,
                                "cuda": choice.cuda, "driver_floor": choice.floor,
                                "driver_recommended": choice.recommended, "warning": choice.warning,
                                "output": output, "backup": None if backup is None else str(backup),
                                "container": container})
    else:
        print(f"{choice.reason}", file=info)
        if output != "-":
            kept = f" (the old one is kept as {shell(str(backup))})" if backup else ""
            print(f"wrote {shown}{kept}: installs cuda-keyring and {choice.package} on {os}", file=info)
            print(f"preview: bash {shown} --dry-run", file=info)
            print(f"run:     sudo bash {shown}", file=info)
    if choice.warning:
        print(f"tfdist setup-gpu: warning: {choice.warning}", file=sys.stderr)
    if container:
        print(f"tfdist setup-gpu: warning: tfdist runs inside a {container} container, but the NVIDIA driver "
              "belongs on the host (containers use the host's driver): run the script on the host", file=sys.stderr)
    return ExitStatus.SUCCESS


def _container() -> str | None:
    """The container tfdist runs in, found by the doctor's own probe (the script's driver belongs on the host)."""
    from tfdist.doctor.probe_system import container_kind
    from tfdist.doctor.roots import ProbeRoots

    return container_kind(ProbeRoots())
