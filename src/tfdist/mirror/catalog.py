"""The mirror catalog: which package mirrors exist and what each one really carries.

The data lives in ``tfdist/data/mirrors.toml``; the official PyPI index is not in that file but read from pip at
run time, so no registry host name is baked into tfdist.
"""
from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from tfdist.errors import UsageError
from tfdist.mirror.urls import check_url
from tfdist.validate import shown

OFFICIAL = "official"
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")


@dataclass(frozen=True)
class Mirror:
    """One package mirror.

    Attributes:
        name: short lowercase id used on the command line, e.g. ``"tuna"``.
        title: human-readable name.
        pip_index: PEP 503 simple-index root for pip and uv; ``None`` when the mirror has no PyPI mirror.
        conda_default_channels: what conda's ``defaults`` expands to on this mirror (empty: not carried).
        conda_custom_channels: community channel name -> base URL, only for channels the mirror carries.
        notes: caveats worth showing to a user.
        sources: where the URLs were checked.
        adhoc: True for a mirror given with ``--url NAME=URL`` rather than taken from the catalog.
        aliases: other names users type for it (``tsinghua`` for ``tuna``).
        sync_status: where it publishes its PyPI sync state, or ``None``.
    """

    name: str
    title: str
    pip_index: str | None
    conda_default_channels: tuple[str, ...] = ()
    conda_custom_channels: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    adhoc: bool = False
    aliases: tuple[str, ...] = ()
    sync_status: "SyncSource | None" = None

    def __hash__(self) -> int:  # dict field: hash on the identity that matters
        return hash((self.name, self.pip_index))

    @property
    def has_conda(self) -> bool:
        """Whether the mirror carries any conda channel tfdist knows about."""
        return bool(self.conda_default_channels or self.conda_custom_channels)

    @property
    def is_official(self) -> bool:
        """Whether this is pip's built-in default index."""
        return self.name == OFFICIAL and not self.adhoc


@dataclass(frozen=True)
class SyncSource:
    """Where a mirror publishes its sync state: ``format`` (``tunasync`` or ``mirrorz``), ``url``, and the job
    (``name`` in tunasync, ``cname`` in mirrorz) that holds PyPI."""

    format: str
    url: str
    name: str = "pypi"


SYNC_FORMATS = ("tunasync", "mirrorz")


@dataclass(frozen=True)
class ProbeDefaults:
    """Catalog-level defaults for ``mirror test``: the project whose page is fetched and the download bound."""

    project: str = "pip"
    max_bytes: int = 4 * 1024 * 1024


def official_pypi_index() -> str:
    """Return pip's built-in default simple-index URL, read from the installed pip (never hard-coded).

    Raises:
        TfdistError: pip is not importable in this interpreter.
    """
    try:
        from pip._internal.models.index import PyPI  # pip's own constant; no public API exposes it
    except ImportError as missing:  # pragma: no cover - pip ships with every venv tfdist supports
        from tfdist.errors import TfdistError

        raise TfdistError(
            "cannot read pip's default index: pip is not installed in this Python",
            hint=f"run '{sys.executable} -m ensurepip'",
            reference="mirror-no-pip",
        ) from missing
    return str(PyPI.simple_url).rstrip("/")


def _load_toml(text: str) -> dict[str, Any]:
    try:
        import tomllib  # Python 3.11+
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomlkit

        return tomlkit.parse(text).unwrap()
    return tomllib.loads(text)


@functools.lru_cache(maxsize=1)
def _raw_catalog() -> dict[str, Any]:
    text = resources.files("tfdist").joinpath("data/mirrors.toml").read_text(encoding="utf-8")
    return _load_toml(text)


def probe_defaults() -> ProbeDefaults:
    """Return the probe project and download bound from the catalog file."""
    probe = _raw_catalog().get("probe", {})
    return ProbeDefaults(project=str(probe.get("project", "pip")), max_bytes=int(probe.get("max_bytes", 4 << 20)))


def load_catalog() -> dict[str, Mirror]:
    """Return every known mirror by name, in catalog order, with ``"official"`` last.

    ``official`` is pip's built-in default index (read from pip at run time) and carries no conda channels:
    switching conda to it removes mirror entries instead.
    """
    mirrors: dict[str, Mirror] = {}
    for name, entry in _raw_catalog()["mirrors"].items():
        mirrors[name] = Mirror(
            name=name,
            title=str(entry["title"]),
            pip_index=entry.get("pip_index") or None,
            conda_default_channels=tuple(entry.get("conda_default_channels", ())),
            conda_custom_channels=dict(entry.get("conda_custom_channels", {})),
            notes=tuple(entry.get("notes", ())),
            sources=tuple(entry.get("sources", ())),
            aliases=tuple(entry.get("aliases", ())),
            sync_status=SyncSource(**entry["sync_status"]) if entry.get("sync_status") else None,
        )
    mirrors[OFFICIAL] = Mirror(
        name=OFFICIAL,
        title="Official PyPI index (pip's built-in default)",
        pip_index=official_pypi_index(),
        notes=("Conda: switching to 'official' removes mirror channels, so conda uses its own defaults.",),
        sources=("pip._internal.models.index.PyPI",),
    )
    return mirrors


def get_mirror(name: str, extra: dict[str, Mirror] | None = None) -> Mirror:
    """Look a mirror up by name (case-insensitive), in ``extra`` (ad-hoc mirrors) first, then the catalog.

    Raises:
        UsageError: the name is unknown; the message lists the known names.
    """
    key = name.lower()  # exact apart from case: " tuna\n" is not a name (it would be printed back as typed)
    if extra and key in extra:
        return extra[key]
    catalog = load_catalog()
    if key in catalog:
        return catalog[key]
    for mirror in catalog.values():
        if key in mirror.aliases:
            return mirror
    known = ", ".join([*catalog, *(extra or {})])
    raise UsageError(
        f"unknown mirror {shown(name)}",
        hint=f"known mirrors: {known}; or add one with --url NAME=URL",
        reference="mirror-unknown",
    )


def parse_adhoc(specs: tuple[str, ...] | list[str], *, allow_insecure: bool = False) -> dict[str, Mirror]:
    """Turn ``NAME=URL`` strings (from ``--url``) into ad-hoc pip/uv mirrors.

    Raises:
        UsageError: malformed spec, invalid name, a name that shadows the catalog, or an insecure URL.
    """
    catalog_names = {OFFICIAL} | {n for m in load_catalog().values() for n in (m.name, *m.aliases)}
    result: dict[str, Mirror] = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        name = name.lower()
        if not sep or not url:
            raise UsageError(f"--url {spec!r} is not NAME=URL", hint="e.g. --url corp=https://pypi.corp/simple")
        if not _NAME.fullmatch(name):
            raise UsageError(f"--url: mirror name {name!r} is invalid", hint="use lowercase letters, digits, '-', '_', '.'")
        if name in catalog_names or name in result:
            raise UsageError(f"mirror name {name!r} is already taken", hint="pick another name for --url")
        clean = check_url(url, allow_insecure=allow_insecure, what="--url")
        result[name] = Mirror(name=name, title=clean, pip_index=clean, adhoc=True)
    return result


def identify(url: str | None, extra: dict[str, Mirror] | None = None) -> str | None:
    """Return the name of the mirror whose pip index is ``url`` (ignoring a trailing slash and case), if any."""
    if not url:
        return None
    wanted = url.strip().rstrip("/").lower()
    for mirror in [*(extra or {}).values(), *load_catalog().values()]:
        if mirror.pip_index and mirror.pip_index.rstrip("/").lower() == wanted:
            return mirror.name
    return None


def known_conda_bases() -> set[str]:
    """Every conda base URL in the catalog (used to recognise channels a previous switch wrote)."""
    bases: set[str] = set()
    for mirror in load_catalog().values():
        bases.update(url.rstrip("/") for url in mirror.conda_custom_channels.values())
        bases.update(url.rstrip("/") for url in mirror.conda_default_channels)
    return bases


def parse_sync_specs(specs: tuple[str, ...] | list[str], *, allow_insecure: bool = False) -> dict[str, SyncSource]:
    """Turn ``NAME=FORMAT:URL`` strings (from ``--sync-status``) into status sources, e.g.
    ``corp=tunasync:https://mirrors.corp/static/tunasync.json``; the PyPI job is assumed to be named ``pypi``.

    Raises:
        UsageError: malformed spec, unknown format, or an invalid URL.
    """
    result: dict[str, SyncSource] = {}
    for spec in specs:
        name, sep, rest = spec.partition("=")
        form, colon, url = rest.partition(":")
        name = name.lower()
        if not sep or not colon or not _NAME.fullmatch(name):
            raise UsageError(f"--sync-status {spec!r} is not NAME=FORMAT:URL",
                             hint="e.g. --sync-status corp=tunasync:https://mirrors.corp/static/tunasync.json")
        if form not in SYNC_FORMATS:
            raise UsageError(f"--sync-status: unknown format {form!r}", hint=f"use one of {', '.join(SYNC_FORMATS)}")
        result[name] = SyncSource(form, check_url(url, allow_insecure=allow_insecure, what="--sync-status"))
    return result
