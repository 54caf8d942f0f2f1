"""``tfdist completion``: the shell completion script (Click's own completion protocol)."""
from __future__ import annotations

import click

COMPLETE_VARIABLE = "_TFDIST_COMPLETE"


@click.command(name="completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def command(ctx: click.Context, shell: str) -> int:
    """Print the completion script for SHELL; load it from your shell's start-up file:

    \b
      bash:  eval "$(tfdist completion bash)"     (in ~/.bashrc)
      zsh:   eval "$(tfdist completion zsh)"      (in ~/.zshrc)
      fish:  tfdist completion fish > ~/.config/fish/completions/tfdist.fish
    """
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # the Choice only offers shells Click knows
    root = ctx.find_root().command
    print(completer(root, {}, "tfdist", COMPLETE_VARIABLE).source())
    return 0
