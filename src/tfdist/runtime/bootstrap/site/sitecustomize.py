"""tfdist's task bootstrap entry (see ``tfdist.runtime.bootstrap``): Python imports this module at start-up because
``tfdist launch`` put its folder first on the task's PYTHONPATH. The script itself then runs exactly as
``python script.py`` runs it: same ``sys.argv``, ``__main__``, ``__file__``, tracebacks and multiprocessing.

Kept tiny and free of errors on purpose: a failure here must never stop the user's script.
"""


def _run() -> None:
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("TFDIST_BOOTSTRAP") == "1":
        try:
            from tfdist.runtime.bootstrap import activate

            activate(here)
        except Exception as error:  # noqa: BLE001 - the script runs anyway, without progress reports
            sys.stderr.write(f"tfdist: the task bootstrap could not start ({type(error).__name__}: {error}); "
                             "the script runs without it\n")
    _chain(here)


def _chain(here: str) -> None:
    """Run the ``sitecustomize`` this one shadows (a distribution's or a virtualenv's), as Python would have."""
    import importlib
    import os
    import sys

    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as error:  # noqa: BLE001 - Python itself only prints a warning for a failing sitecustomize
        sys.stderr.write(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: "
                         f"{error}\n")
    finally:
        sys.path[:] = [p for p in saved if os.path.abspath(p or ".") != here]
        if mine is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = mine


_run()
