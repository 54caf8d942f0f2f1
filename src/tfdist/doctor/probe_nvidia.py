"""The NVIDIA driver and GPUs: NVML first (``nvidia-ml-py``), then ``nvidia-smi`` on PATH, then ``/proc``.

The kernel module's own version (``/proc/driver/nvidia/version``) and the NVIDIA devices on the PCI bus are read
in every case: they tell "no GPU here" apart from "a GPU whose driver is not loaded".
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from tfdist.compat import tables as compat
from tfdist.doctor.facts import DriverFacts, Gpu, LibraryFacts
from tfdist.doctor.probe_system import read_text
from tfdist.doctor.roots import ProbeRoots

_VERSION = re.compile(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b")
# The nvidia-smi header: "Driver Version: 580.95.05   CUDA Version: 13.0"; R610 prints "KMD Version" and
# "CUDA UMD Version" instead.
_HEADER_DRIVER = re.compile(r"(?:Driver|KMD) Version:\s*([\d.]+)")
_HEADER_CUDA = re.compile(r"CUDA (?:UMD )?Version:\s*([\d.]+)")
_QUERY_FIELDS = "index,name,driver_version,compute_cap,memory.total"
_NVML_ERRORS = {
    9: "driver-not-loaded",
    12: "library-not-found",
    15: "gpu-is-lost",
    18: "version-mismatch",
}
_NVIDIA_PCI_VENDOR = "0x10de"
# PCI classes 0x0300 (VGA) and 0x0302 (3D controller): data-centre GPUs are 3D controllers.
_DISPLAY_CLASSES = ("0x0300", "0x0302")


def kernel_module_version(text: str | None) -> str | None:
    """Driver version from ``/proc/driver/nvidia/version`` text (proprietary and open module spellings)."""
    if not text:
        return None
    first = text.splitlines()[0] if text.splitlines() else ""
    after = first.split("Module", 1)[1] if "Module" in first else first
    match = _VERSION.search(after)
    return match.group(1) if match else None


def _pci_devices(roots: ProbeRoots) -> tuple[str, ...]:
    found = []
    base = roots.path("/sys/bus/pci/devices")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return ()
    for device in entries:
        vendor = (read_text(device / "vendor", 64) or "").strip()
        klass = (read_text(device / "class", 64) or "").strip()
        if vendor == _NVIDIA_PCI_VENDOR and klass[:6] in _DISPLAY_CLASSES:
            found.append(device.name)
    return tuple(found)


def _proc_gpus(roots: ProbeRoots) -> list[Gpu]:
    gpus: list[Gpu] = []
    base = roots.proc / "driver" / "nvidia" / "gpus"
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return gpus
    for index, entry in enumerate(entries):
        text = read_text(entry / "information") or ""
        match = re.search(r"^Model:\s*(.+)$", text, re.MULTILINE)
        if match:
            gpus.append(_with_table_cc(Gpu(index=index, name=match.group(1).strip())))
    return gpus


def _with_table_cc(gpu: Gpu) -> Gpu:
    if gpu.compute_capability:
        return gpu
    model = compat.gpu_model(gpu.name)
    if model is None:
        return gpu
    return Gpu(gpu.index, gpu.name, model.cc, "name-table", gpu.memory_mib)


def _cuda_from_int(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def _nvml_visible(roots: ProbeRoots, libraries: LibraryFacts | None) -> bool:
    """Whether the loader can find the NVML library. With a loader cache at hand this is a lookup, which spares
    importing ctypes and pynvml on machines without the driver."""
    name = roots.nvml_library or ""
    if "/" in name:
        return os.path.exists(name)
    if libraries is None or libraries.ldconfig is None:
        return True  # no cache to consult: let dlopen decide
    return any(lib.name == name and (lib.on_loader_path or lib.origin == "wsl") for lib in libraries.libraries)


def _probe_nvml(roots: ProbeRoots, libraries: LibraryFacts | None) -> tuple[dict[str, Any] | None, str | None]:
    """Ask NVML. Returns (result, error). The library is loaded with ctypes first so that a machine without it
    costs one failed dlopen, not the import of the 200 kB ``pynvml`` module."""
    if roots.nvml_library is None:
        return None, "NVML skipped"
    if not _nvml_visible(roots, libraries):
        return None, f"{roots.nvml_library} not found by the loader (ldconfig cache, LD_LIBRARY_PATH)"
    import ctypes

    try:
        ctypes.CDLL(roots.nvml_library)
    except OSError as failure:
        return None, f"cannot load {roots.nvml_library}: {failure}"
    try:
        import pynvml  # from the nvidia-ml-py distribution
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as failure:
        code = getattr(failure, "value", None)
        return {"error_kind": _NVML_ERRORS.get(code, "error")}, f"nvmlInit failed: {failure} (code {code})"
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = _cuda_from_int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            gpus.append(Gpu(index, name, f"{major}.{minor}", "nvml", int(memory)))
        return {
            "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
            "cuda": cuda,
            "gpus": gpus,
        }, None
    except pynvml.NVMLError as failure:
        return None, f"NVML query failed: {failure}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _run(argv: list[str], roots: ProbeRoots) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(roots.env))


def _collect(process: subprocess.Popen[str], roots: ProbeRoots) -> tuple[int, str]:
    try:
        out, _ = process.communicate(timeout=roots.timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        return 124, out or ""
    return process.returncode, out or ""


def parse_query(text: str) -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=index,name,driver_version[,compute_cap],memory.total`` CSV lines."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) not in (4, 5) or not cells[0].isdigit():
            continue
        cc = cells[3] if len(cells) == 5 and re.fullmatch(r"\d+\.\d+", cells[3]) else None
        memory = cells[-1].split()[0] if cells[-1] else ""
        gpus.append(
            _with_table_cc(
                Gpu(
                    int(cells[0]), cells[1], cc, "nvidia-smi" if cc else None, int(memory) if memory.isdigit() else None
                )
            )
        )
    return gpus


def _probe_smi(smi: str, roots: ProbeRoots) -> dict[str, Any]:
    query = [smi, f"--query-gpu={_QUERY_FIELDS}", "--format=csv,noheader,nounits"]
    # The header (driver and CUDA version) and the per-GPU query are independent: run them side by side.
    header_proc, query_proc = _run([smi], roots), _run(query, roots)
    header_rc, header = _collect(header_proc, roots)
    query_rc, table = _collect(query_proc, roots)
    if query_rc != 0 and "compute_cap" in table:
        # R470 and older reject the compute_cap field; the name table fills it in.
        query_rc, table = _collect(
            _run([smi, "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader,nounits"], roots),
            roots,
        )
    result: dict[str, Any] = {"gpus": parse_query(table) if query_rc == 0 else []}
    driver = _HEADER_DRIVER.search(header)
    cuda = _HEADER_CUDA.search(header)
    result["driver"] = driver.group(1) if driver else None
    result["cuda"] = cuda.group(1) if cuda else None
    if result["driver"] is None and result["gpus"]:
        result["driver"] = _first_driver_cell(table)
    combined = header + "\n" + table
    if "couldn't communicate with the NVIDIA driver" in combined:
        result["error_kind"] = "driver-not-loaded"
    elif "Driver/library version mismatch" in combined:
        result["error_kind"] = "version-mismatch"
    elif "No devices were found" in combined:
        result["error_kind"] = "no-devices"
    elif header_rc != 0 and not result["gpus"]:
        result["error_kind"] = "error"
    if "error_kind" in result:
        result["error"] = _first_line(combined)
    return result


def _first_driver_cell(table: str) -> str | None:
    for line in table.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and _VERSION.fullmatch(cells[2]):
            return cells[2]
    return None


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def probe_driver(roots: ProbeRoots, libraries: LibraryFacts | None = None) -> DriverFacts:
    """Find the NVIDIA driver, its versions and its GPUs.

    Args:
        roots: the machine.
        libraries: the library probe's result, used to skip NVML cheaply when its library is absent.
    """
    proc_text = read_text(roots.proc / "driver" / "nvidia" / "version")
    module_version = kernel_module_version(proc_text)
    pci = _pci_devices(roots) if roots.platform.startswith("linux") else ()
    dev_nodes = roots.path("/dev/nvidia0").exists() or roots.path("/dev/dxg").exists()
    common = {
        "kernel_module_version": module_version,
        "kernel_module_text": (proc_text or "").strip() or None,
        "pci_devices": pci,
        "dev_nodes": dev_nodes,
    }

    nvml, nvml_error = _probe_nvml(roots, libraries)
    if nvml is not None and "driver" in nvml:
        state = "ok" if nvml["gpus"] else "no-devices"
        return DriverFacts(
            state=state,
            source="nvml",
            driver_version=nvml["driver"],
            cuda_driver_version=nvml["cuda"],
            gpus=tuple(nvml["gpus"]),
            nvml_error=None,
            **common,
        )
    nvml_kind = (nvml or {}).get("error_kind")

    # On WSL2 the Windows driver exposes nvidia-smi in /usr/lib/wsl/lib, which is not always on PATH.
    smi = roots.which("nvidia-smi", extra_dirs=("/usr/lib/wsl/lib",))
    if smi is not None:
        try:
            found = _probe_smi(smi, roots)
        except OSError as failure:  # present but not runnable (wrong architecture, no permission)
            found = {"gpus": [], "driver": None, "cuda": None, "error_kind": "error", "error": str(failure)}
        kind = found.get("error_kind")
        if kind is None:
            return DriverFacts(
                state="ok" if found["gpus"] else "no-devices",
                source="nvidia-smi",
                driver_version=found["driver"],
                cuda_driver_version=found["cuda"],
                gpus=tuple(found["gpus"]),
                nvml_error=nvml_error,
                nvidia_smi=smi,
                **common,
            )
        state = {"driver-not-loaded": "not-loaded", "version-mismatch": "mismatch", "no-devices": "no-devices"}.get(
            kind, "error"
        )
        return DriverFacts(
            state=state,
            source="nvidia-smi" if found["driver"] else None,
            driver_version=found["driver"],
            cuda_driver_version=found["cuda"],
            gpus=tuple(found["gpus"]),
            nvml_error=nvml_error,
            nvidia_smi=smi,
            nvidia_smi_error=found.get("error"),
            **common,
        )

    if module_version is not None:
        state = "mismatch" if nvml_kind == "version-mismatch" else "ok"
        return DriverFacts(
            state=state,
            source="proc",
            driver_version=module_version,
            gpus=tuple(_proc_gpus(roots)),
            nvml_error=nvml_error,
            **common,
        )
    if nvml_kind == "version-mismatch":
        return DriverFacts(state="mismatch", nvml_error=nvml_error, **common)
    state = "not-loaded" if (pci or nvml_kind == "driver-not-loaded") else "absent"
    return DriverFacts(state=state, nvml_error=nvml_error, **common)
