"""CUDA runtime, cuBLAS, cuDNN, NCCL and driver libraries: where they are, their versions, and whether the dynamic
loader can find them by name (``LD_LIBRARY_PATH``, the ``ldconfig`` cache) or only through a package's own path."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tfdist.compat import tables as compat
from tfdist.doctor.facts import Library, LibraryFacts
from tfdist.doctor.roots import ProbeRoots
from tfdist.doctor.elf import read_soname
from tfdist.doctor.facts import CondaFacts
from tfdist.doctor.owners import attribute_owners

_LDCONFIG_LINE = re.compile(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)\s*")


def _prefixes() -> tuple[str, ...]:
    """The reported library names, each with a dot after it (see :func:`_interesting`)."""
    return tuple(p + "." for p in compat.load_data("cuda_libs")["report_prefixes"])


def _interesting(name: str, dotted: tuple[str, ...]) -> bool:
    """``name`` is ``libcudnn.so`` or ``libcudnn.so.<anything>``: one C-level startswith per name, as the loader
    cache and library folders hold hundreds of names."""
    return (name + ".").startswith(dotted)


def file_version(path: Path) -> str | None:
    """Version in the real file name behind ``path``: ``libcudnn.so.9`` -> ``libcudnn.so.9.1.0`` -> ``"9.1.0"``."""
    try:
        real = os.path.basename(os.path.realpath(path))
    except OSError:
        return None
    _, sep, suffix = real.partition(".so.")
    return suffix if sep and "." in suffix else None


def _scan_dir(folder: Path, origin: str, on_loader_path: bool, prefixes: tuple[str, ...]) -> list[Library]:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [
        Library(n, str(folder / n), file_version(folder / n), origin, on_loader_path)
        for n in names
        if _interesting(n, prefixes)
    ]


def _ldconfig_entries(roots: ProbeRoots, prefixes: tuple[str, ...]) -> tuple[str | None, list[Library]]:
    ldconfig = roots.which("ldconfig", extra_dirs=("/sbin", "/usr/sbin"))
    if ldconfig is None:
        return None, []
    try:
        done = subprocess.run(
            [ldconfig, "-p"], capture_output=True, text=True, timeout=roots.timeout_s, env=dict(roots.env)
        )
    except (OSError, subprocess.TimeoutExpired):
        return ldconfig, []
    foreign = "x86-64" if roots.machine == "x86_64" else None
    found = []
    for line in done.stdout.splitlines():
        words = line.split(None, 1)  # the name first: most of the cache is not CUDA, and the regex costs more
        if not words or not _interesting(words[0], prefixes):
            continue
        match = _LDCONFIG_LINE.fullmatch(line)
        if not match:
            continue
        name, flags, target = match.groups()
        if foreign and foreign not in flags:
            continue  # a 32-bit copy in a multiarch system: not what a 64-bit Python loads
        path = roots.path(target)
        found.append(Library(name, str(path), file_version(path), "ld-cache", True))
    return ldconfig, found


def pip_component(dist: str) -> str | None:
    """The site-packages folder: ``nvidia-cudnn-cu12`` -> ``cudnn``, ``nvidia-cuda-runtime-cu12`` -> ``cuda_runtime``.

    CUDA 13 wheels dropped the suffix (``nvidia-cuda-runtime``). Returns ``None`` for names that are not CUDA
    component wheels.
    """
    match = re.fullmatch(r"nvidia-(.+?)(?:-cu\d+)?", dist)
    if not match or match.group(1) in ("ml-py", "ml_py"):
        return None
    return match.group(1).replace("-", "_")


def _library_component(name: str) -> str | None:
    """``libcudart.so.13`` -> ``cuda_runtime`` (the pip folder of CUDA 12 wheels, which names the dist)."""
    stem = name.split(".so", 1)[0]
    key = {"libcudart": "cudart", "libnvJitLink": "nvjitlink", "libcupti": "cupti"}.get(stem, stem[3:])
    return compat.load_data("cuda_libs")["pip_dirs"].get(key)


def _with_elf_facts(lib: Library) -> Library:
    """Fill the SONAME from the file and, where the file name has no version, the version the SONAME carries."""
    soname = read_soname(lib.path)
    version = lib.version
    if version is None and soname and ".so." in soname:
        version = soname.split(".so.", 1)[1]
    if version is None and ".so." in lib.name:
        version = lib.name.split(".so.", 1)[1]  # libcudart.so.13: at least the major the loader asks for
    return Library(lib.name, lib.path, version, lib.origin, lib.on_loader_path, soname, lib.owner)


def probe_libraries(
    roots: ProbeRoots, nvidia_wheels: dict[str, str], conda: CondaFacts | None = None
) -> LibraryFacts:
    """Collect the CUDA-related libraries of this machine, of pip's ``nvidia-*`` wheels and of the conda prefix.

    Args:
        roots: the machine.
        nvidia_wheels: installed ``nvidia-*`` distribution -> version, to date the wheel libraries.
        conda: the conda environment's package records, to name the package that owns each library.
    """
    prefixes = _prefixes()
    libraries: list[Library] = []
    ld_dirs = [p for p in roots.env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    for folder in ld_dirs:
        libraries += _scan_dir(Path(folder), "LD_LIBRARY_PATH", True, prefixes)
    ldconfig, cached = _ldconfig_entries(roots, prefixes)
    libraries += cached
    loader_dirs = {os.path.realpath(os.path.dirname(lib.path)) for lib in libraries}

    # CUDA 13 wheels (no -cuNN suffix) share one folder, nvidia/cu13/lib: each file's dist comes from its name.
    components = {d: pip_component(d) for d in nvidia_wheels}
    suffixed = {c: (d, nvidia_wheels[d]) for d, c in components.items() if c and re.search(r"-cu[0-9]+\Z", d)}
    unsuffixed = {c: (d, nvidia_wheels[d]) for d, c in components.items() if c and not re.search(r"-cu[0-9]+\Z", d)}
    by_component = {**unsuffixed, **suffixed}
    pip_ptxas = None
    for site in roots.site_dirs:
        base = site / "nvidia"
        try:
            components = sorted(os.listdir(base))
        except OSError:
            continue
        for component in components:
            shared = re.fullmatch(r"cu\d+", component) is not None
            for lib in _scan_dir(base / component / "lib", "pip", False, prefixes):
                key = _library_component(lib.name) if shared else component
                dist, version = (unsuffixed if shared else by_component).get(key or "", (None, None))
                origin = f"pip:{dist}" if dist else "pip"
                libraries.append(Library(lib.name, lib.path, lib.version or version, origin, lib.on_loader_path))
            if component == "cuda_nvcc" and (base / component / "bin" / "ptxas").exists():
                pip_ptxas = str(base / component / "bin" / "ptxas")

    toolkits = []
    try:
        local = sorted(p for p in roots.path("/usr/local").iterdir() if p.name.startswith("cuda"))
    except OSError:
        local = []
    for toolkit in local:
        toolkits.append(str(toolkit))
        for sub in ("lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            folder = toolkit / sub
            visible = os.path.realpath(folder) in loader_dirs
            libraries += _scan_dir(folder, "cuda-toolkit", visible, prefixes)
    wsl = roots.path("/usr/lib/wsl/lib")
    libraries += _scan_dir(wsl, "wsl", os.path.realpath(wsl) in loader_dirs, prefixes)
    conda_lib = Path(conda.prefix) / "lib" if conda and conda.prefix else None
    if conda_lib is None and roots.env.get("CONDA_PREFIX"):
        conda_lib = Path(roots.env["CONDA_PREFIX"]) / "lib"
    if conda_lib is not None:
        libraries += _scan_dir(conda_lib, "conda", os.path.realpath(conda_lib) in loader_dirs, prefixes)

    # The same folder is often reachable twice (/usr/local/cuda -> cuda-13.0): one entry per real folder and name.
    unique: dict[tuple[str, str], Library] = {}
    for lib in libraries:
        key = (os.path.realpath(os.path.dirname(lib.path)), lib.name)
        first = unique.setdefault(key, lib)
        if first is not lib and first.version is None and lib.version:
            # A wheel's folder put on LD_LIBRARY_PATH: keep the loader's view, date it from the wheel.
            owner = f"pip {lib.origin.partition(':')[2]} {lib.version}" if lib.origin.startswith("pip:") else None
            unique[key] = Library(first.name, first.path, lib.version, first.origin, first.on_loader_path, None, owner)
    found = [_with_elf_facts(lib) for lib in unique.values()]
    return LibraryFacts(
        libraries=tuple(attribute_owners(roots, found, conda or CondaFacts())),
        toolkits=tuple(toolkits),
        ptxas=roots.which("ptxas"),
        pip_ptxas=pip_ptxas,
        ldconfig=ldconfig,
    )
