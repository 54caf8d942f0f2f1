"""``tfdist init``: write a working training project (train.py, tfdist.toml, .gitignore, README.md)."""
from __future__ import annotations

from pathlib import Path

import click

from tfdist.cli.common import PathText, option


@click.command(name="init")
@click.argument("folder", required=False, default=".", type=PathText(file_okay=False, path_type=Path))
@option("--name", help="Project name (default: the folder's name).")
def command(folder: Path, name: str | None) -> int:
    """Write a distributed training project into FOLDER (default: here) that tfdist launch runs as it is.

    train.py uses tfdist.runtime (sharded tf.data, a fixed global batch, checkpoints, chief-only save); tfdist.toml
    holds the launch settings. Files that already exist are never overwritten.
    """
    from tfdist import quote
    from tfdist.deploy.scaffold import init_project, project_name

    results = init_project(folder, project_name(folder, name))
    for item in results:
        print(f"{item.status:8} {item.path}" + ("  (exists; left as it is)" if item.status == "kept" else ""))
    where = "" if folder.resolve() == Path.cwd().resolve() else f"cd {quote.shell(str(folder))} && "
    print(f"next: {where}tfdist launch -- train.py")
    return 0
