"""``tfdist setup-gpu``: write a script that adds NVIDIA's apt repository and a fitting driver branch."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tfdist.cli.common import emit_json, option
from tfdist.errors import UsageError
from tfdist.deploy.setup_gpu import DEFAULT_TF, SetupGpuSpec, render_script, supported_systems
from tfdist.status import ExitStatus


@click.command(name="setup-gpu")
@option("--os", "os", required=True, type=click.Choice(supported_systems()),
        help="The machine's operating system; the script refuses to run on any other.")
@option("--tf", default=DEFAULT_TF, show_default=True, help="TensorFlow version whose CUDA the driver must run.")
@option("--driver", type=int, metavar="BRANCH",
        help="Driver branch (e.g. 570) instead of the one picked from the compatibility data.")
@option("-o", "--output", default="setup_gpu.sh", show_default=True, help="Script to write ('-' for stdout).")
@option("--json", "as_json", is_flag=True, help="Print the choice as versioned JSON.")
def command(os: str, tf: str, driver: int | None, output: str, as_json: bool) -> int:
    """Write a script that installs NVIDIA's CUDA repository (cuda-keyring) and a driver branch for TF.

    The script installs no CUDA toolkit or cuDNN: tensorflow[and-cuda] brings them as pip wheels. It checks it runs
    as root on the stated OS, prints its plan, has a --dry-run mode and skips what is already installed.
    """
    if as_json and output == "-":
        raise click.UsageError("--json needs -o FILE: with -o - the script itself goes to stdout")
    name = "setup_gpu.sh" if output == "-" else Path(output).name
    text, choice = render_script(SetupGpuSpec(os=os, tf=tf, driver=driver, script_name=name))
    if output == "-":
        sys.stdout.write(text)
    else:
        path = Path(output)
        try:
            path.write_text(text, encoding="utf-8")
            path.chmod(0o755)
        except OSError as failure:
            raise UsageError(f"cannot write {output}: {failure.strerror}", hint="check -o") from None
    info = sys.stderr if output == "-" or as_json else sys.stdout
    if as_json:
        emit_json("setup_gpu", {"os": os, "tf": tf, "driver_branch": choice.branch, "package": choice.package,
                                "cuda": choice.cuda, "driver_floor": choice.floor,
                                "driver_recommended": choice.recommended, "warning": choice.warning,
                                "output": output})
    else:
        print(f"{choice.reason}", file=info)
        if output != "-":
            print(f"wrote {output}: installs cuda-keyring and {choice.package} on {os}", file=info)
            print(f"preview: bash {output} --dry-run", file=info)
            print(f"run:     sudo bash {output}", file=info)
    if choice.warning:
        print(f"tfdist setup-gpu: warning: {choice.warning}", file=sys.stderr)
    return ExitStatus.SUCCESS
