"""Index URLs: validation of the raw string, credentials (masking, splitting) and pip's ``trusted-host`` form.

Validation looks at the string as given, not at what ``urlsplit`` returns: ``urlsplit`` silently drops tabs, CR and
LF, so a URL that "parses" can still carry a newline into pip.conf or a shell line.
"""
from __future__ import annotations

import re
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

from tfdist.errors import UsageError

MASK = "****"


def check_url(url: str, *, allow_insecure: bool = False, what: str = "mirror URL") -> str:
    """Validate an index URL with the shared rule (:func:`tfdist.validate.url`: the raw text, no whitespace,
    control characters or quotes, a real IPv6 literal, a port in 1-65535), then require https unless
    ``allow_insecure``. A password never appears in the error.

    Returns:
        The URL without a trailing slash.

    Raises:
        UsageError: the URL is refused; the message names ``what`` (the flag).
    """
    from tfdist import validate

    try:
        validate.url(url, what)
    except UsageError as error:
        raise _without_password(error, url) from None
    if urlsplit(url).scheme == "http" and not allow_insecure:
        raise UsageError(
            f"{what} {mask_url(url)!r} uses plain http",
            hint="use https, or pass --allow-insecure if you accept unauthenticated downloads",
            reference="mirror-insecure-url",
        )
    return url.rstrip("/")


def _without_password(error: UsageError, raw: str) -> UsageError:
    if "@" not in raw:
        return error
    from tfdist.validate import shown

    masked = mask_secrets(raw)
    if masked == raw:  # a user-info part the pattern does not parse: hide all of it
        masked = re.sub(r"(?<=://)[^/]*@", MASK + "@", raw)
    message = error.message.replace(shown(raw), shown(masked))
    return UsageError(message, hint=error.hint, reference=error.reference)


def _host_port(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return host if parts.port is None else f"{host}:{parts.port}"


def mask_url(url: str | None) -> str | None:
    """Replace the password of ``user:password@host`` by ``****`` (a lone token ``token@host`` is masked too)."""
    if not url or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/@]*@", "//" + MASK + "@", url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    auth = f"{user}:{MASK}" if parts.password is not None else MASK
    return urlunsplit((parts.scheme, f"{auth}@{netloc}", parts.path, parts.query, parts.fragment))


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/?#@\s:'\"]*)(?P<pw>:[^/?#@\s'\"]*)?@")


def mask_secrets(text: str) -> str:
    """Mask every ``scheme://user:password@`` (and ``scheme://token@``) in free text: a diff, a message, a path."""

    def hide(match: re.Match[str]) -> str:
        if match.group("pw") is not None:
            return f"{match.group('scheme')}{match.group('user')}:{MASK}@"
        return f"{match.group('scheme')}{MASK}@"

    return _USERINFO.sub(hide, text)


def mask_data(value: object) -> object:
    """:func:`mask_secrets` applied to every string inside JSON-like data."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {k: mask_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_data(v) for v in value]
    return value


def has_credentials(url: str | None) -> bool:
    """Whether ``url`` carries a user name or password."""
    if not url or "@" not in url:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.username is not None or parts.password is not None


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """Return ``url`` without its user info, and the (user, password) pair to send as basic auth."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    bare = urlunsplit((parts.scheme, _host_port(parts), parts.path, parts.query, parts.fragment))
    return bare, (unquote(parts.username or ""), unquote(parts.password or ""))


def trusted_host(url: str) -> str | None:
    """pip's ``trusted-host`` value for a plain-http index: ``host``, ``host:port``, ``[v6]`` or ``[v6]:port``.

    pip parses the value with ``parse_netloc`` (``pip/_internal/utils/misc.py``), which only separates an IPv6
    address from its port when the address is bracketed, so ``fd00::5:8089`` would never match the index.
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    return _host_port(parts)
