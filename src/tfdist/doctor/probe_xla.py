"""XLA's GPU toolchain, found the way TensorFlow's XLA finds it (without importing TensorFlow): the candidate CUDA
roots of the installed release in XLA's own order, which of them hold ``nvvm/libdevice/libdevice.10.bc`` and
``bin/ptxas``, the ptxas XLA will run and its ``--version``, ``XLA_FLAGS``, and the nvcc packages installed.
The search order per release is data (``xla_toolchain.json``, each entry with its source)."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import time

from tfdist.compat import tables as compat
from tfdist.compat.versions import at_least, vtuple
from tfdist.doctor.facts import CondaFacts, CudaRoot, Ptxas, TensorFlowFacts, XlaFacts
from tfdist.doctor.roots import ProbeRoots

_DATA_DIR_FLAG = "--xla_gpu_cuda_data_dir"
_PTXAS_VERSION = re.compile(r"\bV(\d+)\.(\d+)\.(\d+)\b")  # XLA's own pattern (subprocess_compilation.cc)
_OUTPUT_LIMIT = 64 * 1024  # a ptxas that prints without end is cut here
_MAX_VERSION_RUNS = 4


def parse_xla_flags(text: str | None) -> tuple[str | None, str | None]:
    """``--xla_gpu_cuda_data_dir`` from ``XLA_FLAGS`` (the last one wins, as in XLA's parser) and a parse error.

    Accepts ``--flag=value`` and ``--flag value`` and shell quoting (``--xla_gpu_cuda_data_dir='/opt/x y'``).
    Unbalanced quotes are reported and the text is split on blanks instead.
    """
    if not text or not text.strip():
        return None, None
    error = None
    try:
        words = shlex.split(text)
    except ValueError as exc:
        error = f"XLA_FLAGS does not parse ({exc}); read it word by word"
        words = text.split()
    value = None
    for index, word in enumerate(words):
        if word.startswith(_DATA_DIR_FLAG + "="):
            value = word.split("=", 1)[1].strip("'\"")
        elif word == _DATA_DIR_FLAG and index + 1 < len(words):
            value = words[index + 1]
    return (value or None), error


def run_version(path: str, timeout_s: float, env: dict[str, str]) -> tuple[str | None, str | None]:
    """``<path> --version``: (version, None) or (None, why not). Bounded in time and output; never raises.

    A hostile or broken binary (hangs, prints without end, prints binary junk, exits non-zero, is not a program)
    gives a reason, not an exception.
    """
    import selectors  # only when a ptxas is run: keeps the doctor's start-up import set small

    try:
        child = subprocess.Popen(
            [path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    except OSError as exc:
        return None, f"could not run it: {exc.strerror or exc}"
    assert child.stdout is not None
    fd = child.stdout.fileno()
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while size <= _OUTPUT_LIMIT and time.monotonic() < deadline:
            if not selector.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            data = os.read(fd, 65536)
            if not data:
                break  # end of output
            chunks.append(data)
            size += len(data)
    reason = None
    if size > _OUTPUT_LIMIT:
        reason = f"more than {_OUTPUT_LIMIT // 1024} KiB of output"
    try:
        child.wait(timeout=0.05 if reason else max(0.05, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        reason = reason or f"no answer within {timeout_s:g} s"
    child.stdout.close()
    if reason:
        return None, reason
    if child.returncode != 0:
        return None, f"exit status {child.returncode}"
    text = b"".join(chunks).decode("utf-8", errors="replace")
    match = _PTXAS_VERSION.search(text)
    if not match:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "no output")
        shown = "".join(c if c.isprintable() else "?" for c in first[:80])
        return None, f"no version in its output: {shown!r}"
    return ".".join(match.groups()), None


def _is_program(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _root(path: str, label: str) -> CudaRoot:
    libdevice_dir = os.path.join(path, "nvvm", "libdevice")
    return CudaRoot(
        path=path,
        label=label,
        libdevice_dir=os.path.isdir(libdevice_dir),
        libdevice=os.path.isfile(os.path.join(libdevice_dir, "libdevice.10.bc")),
        ptxas=_is_program(os.path.join(path, "bin", "ptxas")),
    )


def candidate_roots(
    roots: ProbeRoots, tf_version: str, package_dir: str | None, cuda: str | None, data_dir: str | None
) -> list[tuple[str, str]]:
    """(path, label) of every folder XLA of ``tf_version`` tries as a CUDA root, in its order."""
    data = compat.load_data("xla_toolchain")
    found: list[tuple[str, str]] = [
        (data_dir, "XLA_FLAGS --xla_gpu_cuda_data_dir")
        if data_dir
        else (data["default_data_dir"]["value"], "XLA's default --xla_gpu_cuda_data_dir")
    ]
    cuda_parts = vtuple(cuda)
    for entry in data["candidate_roots"]:
        if not at_least(tf_version, entry["since"]) or ("until" in entry and not at_least(entry["until"] + ".999", tf_version)):
            continue
        template = entry["root"]
        if template == "{toolkit}":
            if len(cuda_parts) < 2:
                continue
            found.append((str(roots.path(f"/usr/local/cuda-{cuda_parts[0]}.{cuda_parts[1]}")), entry["label"]))
        elif template.startswith("{package}"):
            if package_dir:
                found.append((os.path.normpath(package_dir + template[len("{package}") :]), entry["label"]))
        elif template == ".":
            found.append((".", entry["label"]))
        else:
            found.append((str(roots.path(template)), entry["label"]))
    return found


def _elsewhere(roots: ProbeRoots, conda: CondaFacts, searched: set[str]) -> list[CudaRoot]:
    """Folders not in XLA's search that could serve as ``--xla_gpu_cuda_data_dir``: they hold libdevice or ptxas."""
    env = roots.env
    values = {
        "{conda}": conda.prefix or env.get("CONDA_PREFIX"),
        "{cuda_dir}": env.get("CUDA_DIR"),
        "{cuda_home}": env.get("CUDA_HOME"),
        "{cuda_path}": env.get("CUDA_PATH"),
    }
    found: list[CudaRoot] = []
    for entry in compat.load_data("xla_toolchain")["known_elsewhere"]:
        template: str = entry["root"]
        if template.endswith("*"):
            paths = sorted(glob.glob(str(roots.path(template))))
        elif template.startswith("{"):
            key, _, rest = template.partition("}")
            base = values.get(key + "}")
            paths = [os.path.normpath(base + rest)] if base else []
        else:
            paths = [str(roots.path(template))]
        for path in paths:
            real = os.path.realpath(path)
            if real in searched:
                continue
            searched.add(real)
            root = _root(path, entry["label"])
            if root.libdevice or root.ptxas:
                found.append(root)
    return found


def _loose_libdevice(roots: ProbeRoots, conda: CondaFacts) -> list[str]:
    """libdevice.10.bc files where XLA cannot use them: conda's ``lib/`` and Debian's toolkit folder."""
    places = [str(roots.path("/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc"))]
    prefix = conda.prefix or roots.env.get("CONDA_PREFIX")
    if prefix:
        places.insert(0, os.path.join(prefix, "lib", "libdevice.10.bc"))
    return [p for p in places if os.path.isfile(p)]


def _nvcc_packages(tensorflow: TensorFlowFacts, conda: CondaFacts) -> list[str]:
    found = [f"pip {name} {version}" for name, version in sorted(tensorflow.nvidia_wheels.items()) if name.startswith("nvidia-cuda-nvcc")]
    for package in conda.packages:
        if package.name in ("cuda-nvcc", "cuda-nvcc-tools", "cuda-nvvm-tools", "cudatoolkit"):
            channel = f" ({package.channel})" if package.channel else ""
            found.append(f"conda {package.name} {package.version}{channel}")
    return found


def _owner_version(path: str, tensorflow: TensorFlowFacts, conda: CondaFacts) -> tuple[str | None, str | None]:
    """The version of the package that installed ``path``, when ``--version`` could not tell."""
    if f"{os.sep}nvidia{os.sep}cuda_nvcc{os.sep}" in path:
        for name, version in tensorflow.nvidia_wheels.items():
            if name.startswith("nvidia-cuda-nvcc"):
                return version, f"pip {name}"
    if conda.prefix and path.startswith(conda.prefix + os.sep):
        for name in ("cuda-nvcc-tools", "cuda-nvcc", "cudatoolkit"):
            package = conda.package(name)
            if package:
                return package.version, f"conda {name}"
    return None, None


def _find_ptxas(
    roots: ProbeRoots, tf_version: str, data_dir: str | None, candidates: list[tuple[str, str]],
    tensorflow: TensorFlowFacts, conda: CondaFacts,
) -> Ptxas | None:
    """XLA's order: ``<data dir>/bin``, then ``PATH``, then each candidate root's ``bin``. Releases that skip old or
    known-bad ptxas versions move on to the next one, as XLA does."""
    rules = compat.load_data("xla_toolchain")["ptxas_rules"]
    order: list[tuple[str, str]] = []
    if data_dir:
        order.append((os.path.join(data_dir, "bin", "ptxas"), "XLA_FLAGS --xla_gpu_cuda_data_dir"))
    for folder in roots.env.get("PATH", "").split(os.pathsep):
        if folder:
            order.append((os.path.join(folder, "ptxas"), "PATH"))
    order += [(os.path.join(path, "bin", "ptxas"), label) for path, label in candidates[1:]]
    skipping = at_least(tf_version, rules["skipped_since"])
    skipped: list[str] = []
    runs = 0
    seen: set[str] = set()
    for path, found_by in order:
        real = os.path.realpath(path)
        if real in seen or not _is_program(path):
            continue
        seen.add(real)
        runs += 1
        version, error = run_version(path, min(roots.timeout_s, 5.0), dict(roots.env))
        source = "ptxas --version" if version else None
        if version is None:
            version, source = _owner_version(path, tensorflow, conda)
        too_old = version is not None and not at_least(version, rules["skipped_below"])
        if skipping and version is not None and (too_old or version in rules["skipped_versions"]) and runs < _MAX_VERSION_RUNS:
            why = f"older than {rules['skipped_below']}" if too_old else "a version XLA excludes"
            skipped.append(f"{path} ({version}: {why})")
            continue
        return Ptxas(path, found_by, version, source, error, tuple(skipped))
    if skipped:
        return Ptxas("", "nowhere", None, None, "every ptxas found is one this XLA refuses", tuple(skipped))
    return None


def _tf_cuda(tensorflow: TensorFlowFacts) -> str | None:
    from tfdist.errors import UsageError

    cuda = tensorflow.build_info.get("cuda_version")
    if cuda and len(vtuple(str(cuda))) >= 2:
        return str(cuda)
    try:
        return compat.tf_build(tensorflow.version or "").cuda  # build_info said only "10": the table has "10.0"
    except UsageError:
        return str(cuda) if cuda else None


def probe_xla(roots: ProbeRoots, tensorflow: TensorFlowFacts, conda: CondaFacts) -> XlaFacts:
    """Where XLA of the installed TensorFlow will look for libdevice and ptxas, and what it will find there.

    Args:
        roots: the machine.
        tensorflow: the installed TensorFlow (its version and package folder decide the search order).
        conda: the active conda environment (its prefix is searched by 2.21+ and offered as a data dir).
    """
    version = tensorflow.version
    if not (roots.platform.startswith("linux") and version and tensorflow.is_cuda_build):
        return XlaFacts()
    env = roots.env
    raw = env.get("XLA_FLAGS")
    data_dir, error = parse_xla_flags(raw)
    candidates = candidate_roots(roots, version, tensorflow.package_dir, _tf_cuda(tensorflow), data_dir)
    found = [_root(path, label) for path, label in candidates]
    chosen = next((r.path for r in found if r.libdevice_dir), None)
    searched = {os.path.realpath(r.path) for r in found}
    elsewhere = _elsewhere(roots, conda, searched)
    # A file that some nvvm/libdevice folder already reaches (Debian links /usr/lib/cuda/nvvm/libdevice to it) is
    # not loose.
    reached = {
        os.path.realpath(os.path.join(r.path, "nvvm", "libdevice", "libdevice.10.bc")) for r in found + elsewhere if r.libdevice
    }
    return XlaFacts(
        probed=True,
        xla_flags=raw,
        xla_flags_error=error,
        data_dir=data_dir,
        tf_xla_flags=env.get("TF_XLA_FLAGS"),
        roots=tuple(found),
        libdevice_root=chosen,
        ptxas=_find_ptxas(roots, version, data_dir, candidates, tensorflow, conda),
        elsewhere=tuple(elsewhere),
        loose_libdevice=tuple(p for p in _loose_libdevice(roots, conda) if os.path.realpath(p) not in reached),
        nvcc_packages=tuple(_nvcc_packages(tensorflow, conda)),
        cuda_env={k: env[k] for k in ("CUDA_DIR", "CUDA_HOME", "CUDA_PATH") if env.get(k)},
    )
