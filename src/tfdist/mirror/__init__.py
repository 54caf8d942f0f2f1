"""``tfdist mirror``: find the fastest package mirror and switch pip, uv and conda to it without losing anything.

Modules: ``catalog`` (which mirrors exist), ``paths`` (which file each tool reads per scope), ``probe`` (concurrent
speed test and ranking), ``switch`` (plan, diff and apply config edits), ``backup`` (originals and restore),
``status`` (what each tool uses now), ``envvars`` (environment variables and Dockerfile snippets).
"""
