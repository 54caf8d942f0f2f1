"""``tfdist mirror``: find the fastest package mirror and switch pip, uv and conda to it without losing anything.

Modules: ``catalog`` (which mirrors exist, aliases, sync-status sources), ``recipes`` (one per tool: files per scope,
the index each real command uses, the edit, the tool's own view, environment lines), ``paths`` (where each tool's
files live), ``switch`` (plan, overrides, apply, verify), ``backup`` (originals, lock and restore), ``status``
(what each command uses now), ``probe`` / ``pages`` / ``speedtest`` (concurrent speed test and the check before
``use``), ``syncstatus`` (PyPI sync age from tunasync / MirrorZ documents), ``urls`` (validation, masking,
credentials), ``envvars`` (environment variables and Dockerfile snippets), ``render`` (human and JSON output).
"""
