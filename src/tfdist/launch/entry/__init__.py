"""The launch's entry: the only room of ``tfdist.launch`` that knows every other one. ``tfdist launch`` is its flags
and one call to :func:`run`, so a launch can be driven from Python as well::

    from tfdist.launch import entry
    from tfdist.launch.options import LaunchOptions

    status = entry.run(LaunchOptions(target=("train.py",), workers=2))

- :mod:`.checks`: the refusals that need more than one option (GPUs, roles); :mod:`.parity`: which flags work
  across machines;
- :mod:`.compose`: options -> the specs the rooms below run, and the rules more than one way in needs;
- :mod:`.single` (one machine), :mod:`.across` (rendezvous, host file), :mod:`.plan_text` (the dry runs).
"""
from __future__ import annotations

from typing import Mapping

from tfdist.launch.options import LaunchOptions, Mode


def run(options: LaunchOptions, *, given: Mapping[str, str] | None = None) -> int:
    """Launch what ``options`` says, on this machine or across machines; the job's exit status.

    ``given``: the flags the user set to something other than their default, as parameter name -> the flag as set
    (``--live``, or a config file's key), for the across-machines refusals; ``None``: every option that differs from
    its default (:func:`~tfdist.launch.entry.parity.changed_flags`), as a Python caller means it.

    Raises:
        UsageError: a flag, a file or a value that cannot work, before anything starts (exit 2).
    """
    # Each way in is imported when taken: a launch on one machine never loads the multi-machine rooms.
    if options.mode is Mode.SINGLE:
        from tfdist.launch.entry.single import run_single

        return run_single(options)
    from tfdist.launch.entry.across import run_across
    from tfdist.launch.entry.parity import changed_flags

    return run_across(options, changed_flags(options) if given is None else given)
