"""Entry point of the ``tfdist`` command.

Commands are registered by name and imported only when used, so ``tfdist --help`` stays fast and no command pays
for another's imports. This module is the one place where exceptions become exit statuses.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

import click

from tfdist import __version__
from tfdist.constants import DEBUG, ENV_PREFIX
from tfdist.errors import TfdistError
from tfdist.status import ExitStatus

# name -> (module defining `command`, one-line summary shown in `tfdist --help`).
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("tfdist.cli.doctor", "Say why TensorFlow will or won't use the GPU, and the fix."),
    "mirror": ("tfdist.cli.mirror", "Speed-test package mirrors; switch pip, uv and conda to one."),
    "lock": ("tfdist.cli.lock", "Pin a reproducible TensorFlow environment with hashes."),
    "docker": ("tfdist.cli.docker", "Write a Dockerfile that matches the GPU stack."),
    "setup-gpu": ("tfdist.cli.setup_gpu", "Write a script that installs a fitting NVIDIA driver."),
    "launch": ("tfdist.cli.launch", "Start and supervise distributed TensorFlow tasks, here or across machines."),
    "status": ("tfdist.cli.status", "Show how a launched job is doing: each task's state, step and loss."),
    "logs": ("tfdist.cli.logs", "Print or follow (-f) the task logs of a launched job."),
    "dump": ("tfdist.cli.dump", "Dump every task's Python stacks and say which task stopped first."),
    "tf-config": ("tfdist.cli.tf_config", "Print the TF_CONFIG this process resolves to."),
    "slurm": ("tfdist.cli.slurm", "Write an sbatch script that runs the job on Slurm."),
    "k8s": ("tfdist.cli.k8s", "Write Kubernetes manifests (JobSet, Indexed Job, TFJob)."),
    "monitor": ("tfdist.cli.monitor", "Grafana dashboard and Prometheus scrape config for a job."),
    "tensorboard": ("tfdist.cli.tensorboard", "Start TensorBoard on a job's log directory."),
    "init": ("tfdist.cli.init", "Write a training project that tfdist launch runs as it is."),
    "example": ("tfdist.cli.example", "Print or copy an example training script shipped with tfdist."),
    "config": ("tfdist.cli.config", "Show the settings in effect and where each comes from."),
    "completion": ("tfdist.cli.completion", "Print the shell completion script for bash, zsh or fish."),
}


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (module, _) in COMMANDS.items() if _available(module)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None or not _available(entry[0]):
            return None
        command = importlib.import_module(entry[0]).command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Summaries come from the registry so that `--help` imports no command module.
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tfdist")
@click.option("--debug", is_flag=True, envvar=DEBUG, help="Show Python tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """From a bare Linux machine to fault-tolerant distributed TensorFlow training."""


def _wants_debug(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get(DEBUG, "") not in ("", "0", "false")


def _command_path(argv: Sequence[str]) -> str:
    """``tfdist CMD [SUB]`` from the arguments: SUB only when CMD is a group that has it (not a script name)."""
    words = [w for w in argv if not w.startswith("-")][:2]
    if not words or words[0] not in COMMANDS:
        return "tfdist"
    module = sys.modules.get(COMMANDS[words[0]][0])
    group = getattr(module, "command", None)
    if len(words) > 1 and isinstance(group, click.Group) and words[1] in group.commands:
        return f"tfdist {words[0]} {words[1]}"
    return f"tfdist {words[0]}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit status; never raises except under ``--debug``."""
    from tfdist.cli import settings

    args = list(sys.argv[1:] if argv is None else argv)
    debug = _wants_debug(args)
    settings.ORIGINS.clear()
    try:
        settings.ACTIVE = settings.find_config(Path.cwd())
        defaults = settings.default_map(settings.ACTIVE, cli)
        result = cli.main(args=args, prog_name="tfdist", standalone_mode=False, auto_envvar_prefix=ENV_PREFIX,
                          default_map=defaults)
    except click.exceptions.Exit as done:  # --help, --version
        return int(done.exit_code)
    except click.exceptions.Abort:
        return ExitStatus.CTRL_C
    except click.UsageError as bad:
        if isinstance(bad, click.NoSuchOption):
            bad.possibilities = settings.suggest_option(bad.option_name, bad.ctx)
        where = bad.ctx.command_path if bad.ctx is not None else _command_path(args)
        param = getattr(bad, "param", None)
        if param is not None and param.opts and max(param.opts, key=len) in settings.ORIGINS:
            bad.param_hint = settings.ORIGINS[max(param.opts, key=len)]  # type: ignore[attr-defined]
        print(f"{where}: error: {bad.format_message()} (see '{where} --help')", file=sys.stderr)
        return ExitStatus.USAGE
    except click.ClickException as bad:
        print(f"tfdist: error: {bad.format_message()}", file=sys.stderr)
        return bad.exit_code
    except TfdistError as failure:
        if debug:
            raise
        failure.message = settings.name_origins(failure.message)
        print(f"{_command_path(args)}: error: {failure.one_line()}", file=sys.stderr)
        return failure.status
    except KeyboardInterrupt:
        if debug:
            raise
        print("tfdist: interrupted", file=sys.stderr)
        return ExitStatus.CTRL_C
    except BrokenPipeError:
        # Output piped into `head` and the reader left: not an error of ours.
        sys.stderr.close()
        return ExitStatus.SUCCESS
    return int(result) if isinstance(result, int) else ExitStatus.SUCCESS


def run() -> NoReturn:
    """Console-script entry point."""
    sys.exit(main())
