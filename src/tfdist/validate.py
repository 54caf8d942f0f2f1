"""One validation layer for every value that reaches a generated file or a printed command.

Each rule takes the value and the flag (or file) it came from, and returns the value unchanged or raises a
:class:`~tfdist.errors.UsageError` (exit status 2) whose one line names the flag and says what is allowed. Rules
use ``re.fullmatch`` over explicit ASCII classes (``$`` would accept a trailing newline, ``\\w`` and ``\\d`` accept
other scripts' letters and digits), and take lengths and character sets from the consumer's own rules:

========================  ================================================================================
rule                      consumer and source of the limits
========================  ================================================================================
:func:`dns_label`         Kubernetes names (RFC 1123 label: ``[a-z0-9]([-a-z0-9]*[a-z0-9])?``, <= 63)
:func:`dns_subdomain`     Kubernetes object names such as claims (RFC 1123 subdomain, <= 253)
:func:`slurm_job_name`    sbatch ``--job-name`` (tfdist keeps it to one shell-safe word, <= 64)
:func:`slurm_partition`   sbatch ``--partition``: one or more partition names separated by commas
:func:`slurm_time`        sbatch ``--time``: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED
:func:`image_reference`   Docker/OCI image reference grammar (distribution/reference), tag <= 128,
                          name <= 255
:func:`url`               an http(s) URL without whitespace, control characters, quotes or backslashes; a
                          bracketed IPv6 host must be an IPv6 address; the port must be 1-65535
:func:`host`              an IP address or a host name (letters, digits, '.', '-', '_'), <= 253
:func:`file_name`         one path component: no ``/``, not ``.``/``..``, <= 255 bytes, one line
:func:`path_text`         a path: one line, every component a file name, <= 4096 bytes
:func:`version`           a release number such as ``2.21``, ``2.21.0`` or ``2.21.0rc1``
:func:`one_line`          free text for a comment or a config value: no control or format characters
========================  ================================================================================

Text that is only shown, never refused (a machine's name, what a peer sent), goes through :func:`printable`.

Quoting for each target language lives in :mod:`tfdist.quote`; safe writing of outputs in :mod:`tfdist.output`.

Example::

    from tfdist import validate
    name = validate.dns_label(name, "--namespace")
    index = validate.url(index, "--url")
"""
from __future__ import annotations

import ipaddress
import re
import unicodedata
from urllib.parse import urlsplit

from tfdist.errors import UsageError

# Control (Cc), format (Cf: bidi overrides, zero-width), surrogate (Cs) and line/paragraph separators (Zl, Zp):
# none of them belongs in a one-line value, and several end a line for some consumer (YAML, Python, editors).
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHOWN = 40  # characters of a refused value quoted in the error

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
SLURM_JOB_NAME_MAX = 64
IMAGE_NAME_MAX = 255
IMAGE_TAG_MAX = 128
URL_MAX = 2048
FILE_NAME_MAX = 255  # bytes: NAME_MAX of Linux file systems
PATH_MAX = 4096  # bytes
TEXT_MAX = 4096

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"{0}(?:\.{0})*".format(_DNS_LABEL.pattern))
_SLURM_NAME = re.compile(r"[A-Za-z0-9._-]+")
_SLURM_PARTITION = re.compile(r"[A-Za-z0-9._-]+(?:,[A-Za-z0-9._-]+)*")
_N = r"[0-9]{1,6}"  # a count of minutes or days
_T = r"[0-9]{1,2}"  # hours, minutes or seconds within their unit
_SLURM_TIME = re.compile(rf"{_N}|{_N}:{_T}|{_N}:{_T}:{_T}|{_N}-{_T}|{_N}-{_T}:{_T}|{_N}-{_T}:{_T}:{_T}"
                         r"|UNLIMITED|INFINITE")
_VERSION = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,3}(?:(?:a|b|rc)[0-9]{1,4})?")
# distribution/reference grammar, with ASCII classes.
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?"
_IMAGE_NAME = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_IMAGE_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_IMAGE_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_URL_FORBIDDEN = frozenset("\"'`<>\\{}|^")


def shown(value: str) -> str:
    """A value as quoted in an error: Python's repr (escapes newlines and NULs), cut to a readable length."""
    return repr(value) if len(value) <= _SHOWN else repr(value[:_SHOWN]) + f"... ({len(value)} characters)"


PRINTABLE_MAX = 120  # characters of a name or a peer's text shown on one line
LINE_MAX = 4000  # a whole message line that carries such text


def printable(value: object, max_length: int = PRINTABLE_MAX) -> str:
    """``value`` as text safe to print on the operator's terminal: every control, format, surrogate or line-separator
    character (escape sequences, newlines, bidi overrides) is shown as its ``\\x..``/``\\u....`` escape, and the result
    is cut to ``max_length`` characters. For names and messages that come from another machine or a peer."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= max_length and text.isascii() and text.isprintable():
        return text  # the common case, at C speed: printable ASCII has nothing to escape (a join shows ~15 texts)
    shown_chars = []
    length = 0
    for char in text:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            char = char.encode("unicode_escape").decode("ascii") if ord(char) < 0x10000 else f"\\U{ord(char):08x}"
        shown_chars.append(char)
        length += len(char)
        if length > max_length:
            break
    joined = "".join(shown_chars)
    return joined if len(joined) <= max_length else joined[:max_length - 3] + "..."


def refuse(flag: str, value: str, problem: str, hint: str) -> UsageError:
    """The error for a refused value: ``FLAG 'value' PROBLEM (HINT)``, exit status 2."""
    return UsageError(f"{flag} {shown(value)} {problem}", hint=hint, reference="invalid-value")


def bad_character(value: str) -> str | None:
    """The first control, format, surrogate or line-separator character in ``value``, or None."""
    for char in value:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            return char
    return None


def one_line(value: str, flag: str, *, max_length: int = TEXT_MAX, allow_empty: bool = False,
             allow_outer_space: bool = True) -> str:
    """Free text that must stay on one line: refuses control/format characters, and more than ``max_length``."""
    char = bad_character(value)
    if char is not None:
        raise refuse(flag, value, f"contains the control character {char!r}",
                     "use one line of printable characters")
    if not value and not allow_empty:
        raise refuse(flag, value, "is empty", "give a value")
    if len(value) > max_length:
        raise refuse(flag, value, f"is longer than {max_length} characters", "shorten it")
    if not allow_outer_space and value != value.strip():
        raise refuse(flag, value, "starts or ends with white space", "remove the spaces around it")
    return value


def _fullmatch(pattern: re.Pattern[str], value: str, flag: str, max_length: int, what: str, hint: str) -> str:
    if len(value) > max_length:
        raise refuse(flag, value, f"is longer than the {max_length} characters {what} allows", hint)
    if pattern.fullmatch(value) is None:
        raise refuse(flag, value, f"is not {what}", hint)
    return value


def dns_label(value: str, flag: str, *, max_length: int = DNS_LABEL_MAX) -> str:
    """A Kubernetes DNS-1123 label (namespaces, service and job names); ``max_length`` may be tighter than 63."""
    return _fullmatch(_DNS_LABEL, value, flag, min(max_length, DNS_LABEL_MAX), "a DNS label",
                      f"use at most {min(max_length, DNS_LABEL_MAX)} lower-case letters, digits and '-', "
                      "starting and ending with a letter or digit")


def dns_subdomain(value: str, flag: str) -> str:
    """A Kubernetes DNS-1123 subdomain (most object names, e.g. a PersistentVolumeClaim)."""
    return _fullmatch(_DNS_SUBDOMAIN, value, flag, DNS_SUBDOMAIN_MAX, "a DNS subdomain",
                      f"use at most {DNS_SUBDOMAIN_MAX} lower-case letters, digits, '-' and '.', each "
                      "dot-separated part starting and ending with a letter or digit")


def slurm_job_name(value: str, flag: str) -> str:
    """A Slurm job name tfdist can put on an ``#SBATCH`` line and into file names unquoted."""
    return _fullmatch(_SLURM_NAME, value, flag, SLURM_JOB_NAME_MAX, "a usable job name",
                      f"use 1-{SLURM_JOB_NAME_MAX} letters, digits, '.', '_' or '-'")


def slurm_partition(value: str, flag: str) -> str:
    """One partition name, or several separated by commas (sbatch tries them in turn)."""
    return _fullmatch(_SLURM_PARTITION, value, flag, 1024, "a partition name",
                      "use a partition name (letters, digits, '.', '_', '-'), or several joined by commas")


def slurm_time(value: str, flag: str) -> str:
    """A Slurm time limit."""
    return _fullmatch(_SLURM_TIME, value, flag, 32, "a Slurm time",
                      "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED")


def version(value: str, flag: str) -> str:
    """A release number: ``2.21``, ``2.21.0``, ``2.21.0rc1`` (no spaces, no ``v`` prefix)."""
    return _fullmatch(_VERSION, value, flag, 32, "a version number", "use digits and dots, e.g. 2.21")


def image_reference(value: str, flag: str, *, allow_digest: bool = True) -> str:
    """A Docker/OCI image reference: ``[registry[:port]/]path[:tag][@algorithm:hex]``."""
    hint = "use e.g. registry.example:5000/team/name:tag (lower-case path, tag of letters, digits, '_', '.', '-')"
    one_line(value, flag)
    rest, _, digest = value.partition("@") if allow_digest else (value, "", "")
    if "@" in value and (not allow_digest or not _IMAGE_DIGEST.fullmatch(digest)):
        raise refuse(flag, value, "has no valid digest after '@'" if allow_digest else "may not contain '@'", hint)
    name, tag = rest, ""
    slash, colon = rest.rfind("/"), rest.rfind(":")
    if colon > slash:  # a ':' after the last '/' starts the tag; before it, it is a registry port
        name, tag = rest[:colon], rest[colon + 1:]
        _fullmatch(_IMAGE_TAG, tag, flag, IMAGE_TAG_MAX, "a valid image tag", hint)
    _fullmatch(_IMAGE_NAME, name, flag, IMAGE_NAME_MAX, "an image reference", hint)
    return value


def url(value: str, flag: str, *, schemes: tuple[str, ...] = ("http", "https")) -> str:
    """A URL as written into a config file: refused unless it parses back to exactly itself.

    ``urlsplit`` silently drops tabs and newlines, so the raw text is checked first; then the scheme, the host
    (a bracketed host must be an IPv6 address) and the port (1-65535) are checked.
    """
    hint = "give one URL such as https://host[:port]/path, without spaces or quotes"
    one_line(value, flag, max_length=URL_MAX)
    odd = next((c for c in value if c.isspace() or c in _URL_FORBIDDEN or ord(c) > 126), None)
    if odd is not None:
        raise refuse(flag, value, f"contains {odd!r}, which is not allowed in a URL", hint)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as failure:  # bad IPv6 bracket, port not a number or out of range
        raise refuse(flag, value, f"is not a URL ({failure})", hint) from None
    if parts.scheme not in schemes:
        raise refuse(flag, value, "has no " + " or ".join(f"{s}://" for s in schemes) + " scheme", hint)
    host_text = parts.netloc.rpartition("@")[2]
    host = parts.hostname or ""
    if host_text.startswith("["):
        try:
            ipaddress.IPv6Address(host.split("%")[0])
        except ValueError:
            raise refuse(flag, value, f"has {host_text.partition(']')[0]}] which is not an IPv6 address",
                         hint) from None
    elif not _HOST_NAME.fullmatch(host) or ".." in host:
        raise refuse(flag, value, "has no valid host name", hint)
    if port == 0 or (port is None and host_text.endswith(":")):
        raise refuse(flag, value, "has an empty or zero port", "use a port between 1 and 65535")
    return value


def host(value: str, flag: str) -> str:
    """A host to reach: an IPv4 or IPv6 address (unbracketed), or a host name of letters, digits, '.', '-', '_'
    (<= 253 characters, no empty label)."""
    one_line(value, flag, max_length=DNS_SUBDOMAIN_MAX)
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not _HOST_NAME.fullmatch(value) or ".." in value:
        raise refuse(flag, value, "is not an IP address or a host name",
                     "use e.g. 127.0.0.1, fd00::5 or node-01.cluster")
    return value


def file_name(value: str, flag: str) -> str:
    """One path component: a plain file name."""
    one_line(value, flag)
    if "/" in value or value in (".", ".."):
        raise refuse(flag, value, "is not a plain file name", "give a name without '/'")
    if len(value.encode("utf-8", "surrogatepass")) > FILE_NAME_MAX:
        raise refuse(flag, value, f"is longer than {FILE_NAME_MAX} bytes", "use a shorter name")
    return value


def path_text(value: str, flag: str) -> str:
    """A file system path that is embedded in a generated file: one line, each component a plain file name."""
    one_line(value, flag, max_length=PATH_MAX)
    if len(value.encode("utf-8", "surrogatepass")) > PATH_MAX:
        raise refuse(flag, value, f"is longer than {PATH_MAX} bytes", "use a shorter path")
    for part in value.split("/"):
        if len(part.encode("utf-8", "surrogatepass")) > FILE_NAME_MAX:
            raise refuse(flag, value, f"has a component longer than {FILE_NAME_MAX} bytes", "use shorter names")
    return value
