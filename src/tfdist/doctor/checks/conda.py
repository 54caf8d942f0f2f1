"""conda environments: activation scripts that set ``LD_LIBRARY_PATH`` but have not taken effect in this shell
(the environment was not re-activated after the script was written, or a shell profile overwrote the variable)."""

from __future__ import annotations

from shlex import quote

from tfdist.doctor.context import Context
from tfdist.doctor.findings import ERROR, WARNING, Finding


def check_conda(ctx: Context) -> list[Finding]:
    """Activation scripts whose folders are missing from the current ``LD_LIBRARY_PATH``."""
    conda = ctx.facts.conda
    if conda.prefix is None or not ctx.linux:
        return []
    stale = [s for s in conda.activation_scripts if not s.applied]
    if not stale:
        return []
    current = ":".join(ctx.facts.system.ld_library_path) or "(unset)"
    needed = set(ctx.loader)  # sonames that resolve now
    wanted_here = any(
        lib.origin == "conda" and not lib.on_loader_path and lib.name not in needed
        for lib in ctx.facts.libraries.libraries
    )
    evidence = []
    for script in stale:
        evidence += [f"{script.path}: {line}" for line in script.lines]
        evidence.append(f"folders it adds: {', '.join(script.folders)}")
    evidence.append(f"LD_LIBRARY_PATH now: {current}")
    return [
        Finding(
            "conda-activation-not-applied",
            ERROR if wanted_here and ctx.cuda_build and ctx.gpu_wanted else WARNING,
            "The conda environment's activation script sets LD_LIBRARY_PATH, but this shell does not have it",
            tuple(evidence),
            fix=f"conda deactivate && conda activate {quote(conda.prefix)}",
            detail="activate.d scripts run only when the environment is activated; a script written into an "
            "active environment, or a shell profile that resets LD_LIBRARY_PATH afterwards, leaves it unapplied.",
        )
    ]
