"""Which TensorFlow distribution(s) are installed, how the installed files were built, and the Python packages
around it (Keras 3 / tf-keras, torch, pip's nvidia-* wheels). Nothing is imported: folder names, ``RECORD`` and
``build_info.py`` (parsed with :mod:`ast`) say it all."""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path
from typing import Any

from tfdist.compat import tables as compat
from tfdist.doctor.facts import Distribution, TensorFlowFacts
from tfdist.doctor.roots import ProbeRoots

_BUILD_INFO = ("tensorflow/python/platform/build_info.py", "tensorflow_core/python/platform/build_info.py")


def normalize(name: str) -> str:
    """PEP 503 normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_distributions(site_dirs: tuple[Path, ...]) -> dict[str, Distribution]:
    """Distributions in ``site_dirs`` by normalised name, the first one on the path winning (as imports do).

    Only folder names are read: ``name-version.dist-info`` (and ``.egg-info``), which is what makes this fast
    compared with ``importlib.metadata``, which parses every distribution's metadata.
    """
    found: dict[str, Distribution] = {}
    for site in site_dirs:
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            for suffix in (".dist-info", ".egg-info"):
                if entry.endswith(suffix):
                    stem = entry[: -len(suffix)]
                    name, _, version = stem.partition("-")
                    if version:
                        found.setdefault(
                            normalize(name), Distribution(normalize(name), version.split("-")[0], str(site / entry))
                        )
    return found


def parse_build_info(text: str) -> tuple[str, dict[str, Any]]:
    """Read a TensorFlow ``build_info.py`` without running it.

    Three historical formats are handled: module-level assignments (2.0-2.2), ``build_info = {...}`` (2.3) and
    ``build_info = collections.OrderedDict([...])`` (2.4+). Old key names (``cuda_version_number``) are mapped to
    the current ones.

    Returns:
        (format name, the build_info mapping).

    Raises:
        ValueError: the text is not Python or has none of the three shapes.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as bad:
        raise ValueError(f"not Python: {bad}") from bad
    info: dict[str, Any] = {}
    shape = None
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name, value = node.targets[0].id, node.value
        try:
            if name == "build_info":
                if isinstance(value, ast.Call) and value.args:
                    info.update(dict(ast.literal_eval(value.args[0])))
                    shape = "ordered-dict"
                else:
                    info.update(ast.literal_eval(value))
                    shape = "dict"
            else:
                info[name] = ast.literal_eval(value)
                shape = shape or "module-assignments"
        except (ValueError, TypeError, SyntaxError):
            continue
    if shape is None:
        raise ValueError("no build_info found")
    for old, new in (("cuda_version_number", "cuda_version"), ("cudnn_version_number", "cudnn_version")):
        if old in info and new not in info:
            info[new] = info.pop(old)
    return shape, info


def _record_hash(path: Path) -> str:
    import base64  # only when several TF distributions are installed
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _record_line(dist: Distribution, relative: str) -> str | None:
    # Search the bytes instead of decoding and splitting every line.
    data = _record_bytes(dist.location)
    if not data:
        return None
    key = relative.encode() + b","
    start = 0 if data.startswith(key) else data.find(b"\n" + key) + 1
    if start == 0 and not data.startswith(key):
        return None
    end = data.find(b"\n", start)
    return data[start : end if end >= 0 else len(data)].decode("utf-8", "replace").strip()


@functools.lru_cache(maxsize=16)
def _record_bytes(location: str) -> bytes:
    """A dist-info's RECORD (a TF wheel's is ~2 MB), read once per run; empty when missing."""
    try:
        return (Path(location) / "RECORD").read_bytes()
    except OSError:
        return b""


def _ships_files(dist: Distribution) -> bool:
    """Whether the distribution installs any file of the package itself; a metapackage (Windows ``tensorflow``
    2.11+ requiring ``tensorflow-intel``) lists only its dist-info. Unknown (no RECORD) counts as shipping."""
    data = _record_bytes(dist.location)
    if not data:
        return True
    return any(data.startswith(p) or b"\n" + p in data for p in (b"tensorflow/", b"tensorflow_core/"))


def _files_owner(dists: list[Distribution], build_info: Path, relative: str) -> str | None:
    """The distribution whose RECORD lists ``build_info.py`` as the file now on disk.

    The size column decides when it differs between the candidates; the hash is computed only on a tie, since
    hashlib loads OpenSSL (start-up time and memory).
    """
    lines = {d.name: line for d in dists if (line := _record_line(d, relative))}
    try:
        size = str(build_info.stat().st_size)
    except OSError:
        return None
    same_size = [name for name, line in lines.items() if line.rsplit(",", 1)[-1] == size]
    if len(same_size) <= 1:
        return same_size[0] if same_size else None
    digest = _record_hash(build_info)
    matching = [name for name in same_size if lines[name].split(",")[1] == digest]
    return matching[0] if matching else None


def _requirement(dist: Distribution, prefix: str) -> str | None:
    try:
        with open(Path(dist.location) / "METADATA", encoding="utf-8") as metadata:
            for line in metadata:
                if line.startswith("Requires-Dist:") and line.split(":", 1)[1].strip().startswith(prefix):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break  # headers end at the first blank line; the long description follows
    except OSError:
        return None
    return None


def probe_tensorflow(roots: ProbeRoots) -> TensorFlowFacts:
    """Collect the TensorFlow installation facts from ``roots.site_dirs``."""
    dists = installed_distributions(roots.site_dirs)
    known = compat.load_data("tf_distributions")["distributions"]
    tf_dists = [dists[name] for name in known if name in dists]
    meta: list[str] = []
    if len(tf_dists) > 1:
        meta = [d.name for d in tf_dists if not _ships_files(d)]
    package_dir = build_path = shape = owner = None
    info: dict[str, Any] = {}
    for site in roots.site_dirs:
        for relative in _BUILD_INFO:
            candidate = site / relative
            if candidate.is_file():
                build_path = candidate
                package_dir = str(site / relative.split("/")[0])
                try:
                    shape, info = parse_build_info(candidate.read_text(encoding="utf-8", errors="replace"))
                except ValueError:
                    shape = "unreadable"
                shipping = [d for d in tf_dists if d.name not in meta]
                if len(shipping) > 1:
                    owner = _files_owner(shipping, candidate, relative)
                elif shipping:
                    owner = shipping[0].name
                break
        if build_path is not None:
            break
    torch = dists.get("torch")
    return TensorFlowFacts(
        dists=tuple(tf_dists),
        package_dir=package_dir,
        build_info_path=str(build_path) if build_path else None,
        build_info_format=shape,
        build_info=info,
        files_owner=owner,
        metapackages=tuple(meta),
        keras=dists["keras"].version if "keras" in dists else None,
        tf_keras=dists["tf-keras"].version if "tf-keras" in dists else None,
        torch=torch.version if torch else None,
        torch_cudnn_pin=_requirement(torch, "nvidia-cudnn-cu") if torch else None,
        nvidia_wheels={
            n: d.version for n, d in sorted(dists.items()) if n.startswith("nvidia-") and n != "nvidia-ml-py"
        },
    )
