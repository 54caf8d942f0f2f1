"""``tfdist example``: print or write one of the example training scripts shipped inside the package."""
from __future__ import annotations

import sys
from importlib import resources

import click

from tfdist.cli.common import PathText, option


def shipped_examples() -> list[str]:
    """Names of the example scripts in ``tfdist.examples`` (``digits`` for ``digits.py``)."""
    folder = resources.files("tfdist.examples")
    return sorted(entry.name[:-3] for entry in folder.iterdir()
                  if entry.name.endswith(".py") and not entry.name.startswith("_"))


@click.command(name="example")
@click.argument("name", required=False)
@option("-o", "--output", type=PathText(dir_okay=False),
        help="Write the script here instead of printing it (never over an existing file without --force).")
@option("--force", is_flag=True, help="Replace an existing --output file.")
def command(name: str | None, output: str | None, force: bool) -> int:
    """Print (or write with -o) an example training script that ships with tfdist; without NAME, list them.

    Each one also runs straight from the package: tfdist launch -n 2 -m tfdist.examples.NAME
    """
    from tfdist.errors import UsageError
    from tfdist import quote
    from tfdist.output import write_output
    from tfdist.validate import shown

    names = shipped_examples()
    if name is None:
        for known in names:
            print(f"{known}\ttfdist launch -n 2 -m tfdist.examples.{known}")
        return 0
    if name not in names:
        raise UsageError(f"no example named {shown(name)}", hint="known: " + ", ".join(names))
    text = resources.files("tfdist.examples").joinpath(f"{name}.py").read_text(encoding="utf-8")
    if output is None:
        sys.stdout.write(text)
        return 0
    backup = write_output(output, text, force=force, flag="--output")
    kept = f" (the old one is kept as {quote.shell(str(backup))})" if backup else ""
    print(f"wrote {quote.shell(output)}{kept}; run it with: tfdist launch -n 2 -- {quote.shell(output)}",
          file=sys.stderr)
    return 0
