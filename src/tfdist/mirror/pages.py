"""Reading PEP 503 simple-index pages: which file a probe downloads.

``pick_wheel`` takes the newest wheel of the probe project; ``pick_pinned`` the wheel of one exact release that pip
would choose on this machine (best match in pip's own ``sys_tags`` order), for ``mirror test --package``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit, urlunsplit


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))



@dataclass(frozen=True)
class PackagePin:
    """An exact release, ``NAME==VERSION``."""

    name: str
    version: str

    @property
    def project(self) -> str:
        """The PEP 503 normalised project name used in the index URL."""
        return re.sub(r"[-_.]+", "-", self.name).lower()


_PIN = re.compile(r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?)==(?P<version>[A-Za-z0-9.+!_-]{1,64})")


def parse_pin(text: str) -> PackagePin:
    """Parse ``--package NAME==VERSION``.

    Raises:
        UsageError: anything but an exact ``name==version``.
    """
    from tfdist.errors import UsageError

    match = _PIN.fullmatch(text)
    if not match:
        raise UsageError(f"--package {text!r} is not NAME==VERSION", hint="e.g. --package tensorflow==2.21.0",
                         reference="mirror-package-invalid")
    return PackagePin(match.group("name"), match.group("version"))



def pick_wheel(page: bytes, page_url: str) -> tuple[str | None, bool]:
    """Return the newest wheel's URL on a PEP 503 page (the last .whl link) and whether it advertises metadata."""
    parser = _Links()
    parser.feed(page.decode("utf-8", errors="replace"))
    chosen: tuple[str | None, bool] = (None, False)
    for attrs in parser.links:
        href = attrs.get("href") or ""
        path = urlsplit(href).path
        if path.endswith(".whl"):
            advertised = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
            has_metadata = advertised is not None and advertised.lower() != "false"
            parts = urlsplit(urljoin(page_url, href))
            chosen = (urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, "")), has_metadata)
    return chosen


def pick_pinned(page: bytes, page_url: str, pin: PackagePin) -> tuple[str | None, bool]:
    """The wheel of exactly ``pin`` that best fits this machine (pip's own tag order), and its metadata flag."""
    from pip._vendor.packaging.tags import sys_tags
    from pip._vendor.packaging.utils import InvalidWheelFilename, canonicalize_version, parse_wheel_filename

    preference = {tag: rank for rank, tag in enumerate(sys_tags())}
    wanted = canonicalize_version(pin.version)
    parser = _Links()
    parser.feed(page.decode("utf-8", errors="replace"))
    best: tuple[int, str, bool] | None = None
    for attrs in parser.links:
        href = attrs.get("href") or ""
        filename = urlsplit(href).path.rsplit("/", 1)[-1]
        if not filename.endswith(".whl"):
            continue
        try:
            _, version, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if canonicalize_version(version) != wanted:
            continue
        ranks = [preference[t] for t in tags if t in preference]
        if not ranks:
            continue
        advertised = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        parts = urlsplit(urljoin(page_url, href))
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
        if best is None or min(ranks) < best[0]:
            best = (min(ranks), url, advertised is not None and advertised.lower() != "false")
    return (best[1], best[2]) if best else (None, False)
