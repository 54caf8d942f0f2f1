"""The README is the way in, the MkDocs site under docs/ the reference: the README opens with the two commands CI
and the hooks grep for, stays short enough to read through, and links only to pages that exist and are in the site;
the site builds with ``mkdocs build --strict`` (a broken link or anchor, a missing page or snippet, a page left out of
the navigation fails). The strict build is a test rather than a Makefile step so that ``make test`` stays the one
command CI runs (.ci/run) and a failure reads like any other test's."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit
import yaml

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
README_MAX_LINES = 400
# The README's first lines, exactly: .ci and the hooks grep for these two commands, and a newcomer reads them first.
README_OPENING = """# tfdist

```sh
make demo   # creates .venv, installs tfdist[cpu,examples], trains the digits model on 2 local workers under tfdist launch
make test   # installs the system packages the tests use (as CI does), then runs the whole suite in .venv (dev extras)
```
"""
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def nav_pages() -> set[str]:
    def walk(node) -> set[str]:
        if isinstance(node, str):
            return {node}
        if isinstance(node, list):
            return set().union(*(walk(n) for n in node)) if node else set()
        if isinstance(node, dict):
            return set().union(*(walk(v) for v in node.values()))
        return set()

    config = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return walk(config["nav"])


def test_readme_opens_with_the_two_commands_exactly():
    assert readme().startswith(README_OPENING)


def test_readme_is_short_enough_to_read_through():
    lines = len(readme().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move reference text into a page under docs/"


def test_readme_says_how_to_install_every_extra():
    text = readme()
    # The extras come from pyproject.toml itself, so a new extra needs its row.
    extras = tomlkit.parse((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"]
    install = text.split("\n## Install", 1)[1].split("\n## ", 1)[0]
    for extra in extras:
        assert f"| `{extra}` |" in install, f"the README's install table does not list the extra {extra!r}"
    assert "pip install 'tfdist[etcd]'" in install and "pip install '.[cpu,examples,etcd]'" in install


def test_readme_links_to_pages_that_exist_and_are_in_the_site():
    targets = [t for t in LINK.findall(readme()) if "://" not in t]
    assert targets, "the README links to no page"
    pages = nav_pages()
    for target in targets:
        path = target.split("#", 1)[0]
        assert (REPO_ROOT / path).is_file(), f"README.md links to {target}, which does not exist"
        if path.startswith("docs/") and path.endswith(".md"):
            assert path.removeprefix("docs/") in pages, f"{path} is linked from the README but not in mkdocs.yml nav"


def test_every_page_is_linked_from_the_readme():
    linked = {t.split("#", 1)[0] for t in LINK.findall(readme())}
    unlinked = sorted(f"docs/{p}" for p in nav_pages() if f"docs/{p}" not in linked and p != "index.md")
    assert not unlinked, f"add these pages to the README's 'Where to go next': {unlinked}"


def test_every_command_has_its_place_in_the_docs():
    from tfdist.cli.main import COMMANDS

    # The README's sections are part of the site (docs/getting-started.md includes them), so they count.
    text = readme() + "".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    missing = sorted(name for name in COMMANDS if f"tfdist {name}" not in text)
    assert not missing, f"neither the README nor a page under docs/ documents: {missing}"



def test_every_flag_of_every_command_is_in_the_docs():
    """The reference names every flag a user can type (its long or its short form), so --help is never the only
    place a flag is explained; hidden flags (the launcher's own plumbing) are left out."""
    import click

    from tfdist.cli.main import cli

    text = readme() + "".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    ctx = click.Context(cli)
    missing = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), (*path, name))
            return
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                names = [*param.opts, *param.secondary_opts]
                if not any(re.search(re.escape(name) + r"(?![\w-])", text) for name in names):
                    missing.append(f"tfdist {' '.join(path)} {names[-1]}")

    walk(cli, ())
    assert not missing, f"document these flags in the page of their command under docs/: {missing}"

def test_the_docs_site_builds_strictly(tmp_path):
    try:
        import material  # noqa: F401  (mkdocs-material, the site's theme)
        import mkdocs  # noqa: F401
    except ImportError as exc:  # the dev extra has both: make test installs it
        pytest.fail(f"{exc.name} is missing: pip install -e '.[dev]' (make venv-dev)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life notice, not a warning about the site
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    # Every page was rendered, with the README's sections included where the pages ask for them.
    for page in nav_pages():
        name = page.removesuffix(".md")
        html = tmp_path / "site" / ("index.html" if name == "index" else f"{name}/index.html")
        assert html.is_file(), f"{page} was not rendered"
    started = (tmp_path / "site" / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert "rdzv-secret-file" in started and "--8&lt;--" not in started and "--8<--" not in started
