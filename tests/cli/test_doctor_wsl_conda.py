"""``tfdist doctor`` through the CLI on two machines built on disk by the test: a WSL2 distribution (the Windows
driver's libcuda in /usr/lib/wsl/lib, with and without WSL's ld.wsl.conf) and a conda environment (conda-meta records
in conda's format, its lib folder, an activation script). Every shared library is a real ELF file compiled with gcc
and the SONAME the real one has, so the doctor's own ELF reader sees what the loader would."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tfdist.cli.main import main

_BUILDER = Path(__file__).resolve().parents[1] / "fixtures" / "doctor" / "builder.py"
_spec = importlib.util.spec_from_file_location("doctor_fixture_builder_cli", _BUILDER)
assert _spec is not None and _spec.loader is not None
builder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(builder)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build real shared objects")

# File name -> SONAME where the real library's SONAME is not "<name up to its first version number>".
_SONAMES = {"libcudart.so.11.8.89": "libcudart.so.11.0", "libcuda.so.1.1": "libcuda.so.1", "libcudnn.so": "libcudnn.so.8"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Compile (once per SONAME) a tiny shared object carrying that SONAME."""
    folder = tmp_path_factory.mktemp("elf")
    source = folder / "stub.c"
    source.write_text("int tfdist_stub(void) { return 0; }\n", encoding="utf-8")
    cache: dict[str, Path] = {}

    def build(soname: str) -> Path:
        if soname not in cache:
            target = folder / soname
            subprocess.run(
                ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(target), str(source)],
                check=True,
                capture_output=True,
            )
            cache[soname] = target
        return cache[soname]

    return build


def _make_real(root: Path, build: Any) -> int:
    """Replace every library stub the builder wrote under ``root`` by a real ELF file with the right SONAME."""
    count = 0
    for path in root.rglob("lib*.so*"):
        if path.is_symlink() or not path.is_file():
            continue
        name = path.name
        soname = _SONAMES.get(name)
        if soname is None:
            stem, _, version = name.partition(".so.")
            soname = f"{stem}.so.{version.split('.')[0]}" if version else f"{stem}.so"
        shutil.copyfile(build(soname), path)
        count += 1
    return count


def _run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], roots: Any, *args: str) -> tuple[int, str]:
    monkeypatch.setattr("tfdist.doctor.roots.machine_roots", lambda: roots)
    rc = main(["doctor", *args])
    return rc, capsys.readouterr().out


_WSL_KERNEL = "5.15.153.1-microsoft-standard-WSL2"
_CU12 = {
    "cuda_runtime": ["libcudart.so.12"],
    "cublas": ["libcublas.so.12", "libcublasLt.so.12"],
    "cufft": ["libcufft.so.11"],
    "curand": ["libcurand.so.10"],
    "cusolver": ["libcusolver.so.11"],
    "cusparse": ["libcusparse.so.12"],
    "nvjitlink": ["libnvJitLink.so.12"],
    "cudnn": ["libcudnn.so.9"],
    "nccl": ["libnccl.so.2"],
    "cuda_nvcc": ["ptxas", "nvvm/libdevice/libdevice.10.bc"],  # the wheel ships both (XLA uses them)
}
_CU12_DISTS = {
    "tensorflow": "2.19.0",
    "nvidia-cublas-cu12": "12.5.3.2",
    "nvidia-cuda-nvcc-cu12": "12.5.82",
    "nvidia-cuda-runtime-cu12": "12.5.82",
    "nvidia-cudnn-cu12": "9.3.0.75",
    "nvidia-cufft-cu12": "11.2.3.61",
    "nvidia-curand-cu12": "10.3.6.82",
    "nvidia-cusolver-cu12": "11.6.3.83",
    "nvidia-cusparse-cu12": "12.5.1.3",
    "nvidia-nccl-cu12": "2.23.4",
    "nvidia-nvjitlink-cu12": "12.5.82",
}


def _wsl_machine(*, loader_conf: bool) -> dict[str, Any]:
    header = (
        "+-----------------------------------------------------------------------------------------+\n"
        "| NVIDIA-SMI 565.77                 Driver Version: 566.36         CUDA Version: 12.7     |\n"
        "|-----------------------------------------+------------------------+----------------------+\n"
    )
    machine: dict[str, Any] = {
        "kernel": _WSL_KERNEL,
        "proc_version": f"Linux version {_WSL_KERNEL} (root@1c602f52c2e4) (gcc (GCC) 11.2.0) #1 SMP Fri Mar 29 23:14:13 UTC 2024\n",
        "python": "3.11.9",
        "glibc": "2.35",
        "nvidia_smi_dir": "/usr/lib/wsl/lib",
        "nvidia_smi": {"header": header, "query": "0, NVIDIA GeForce RTX 4090, 566.36, 8.9, 24564\n"},
        "dev": ["dxg"],
        # WSL ships these as separate copies, not links (microsoft/WSL#5548).
        "files": ["/usr/lib/wsl/lib/libcuda.so.1.1", "/usr/lib/wsl/lib/libcuda.so.1", "/usr/lib/wsl/lib/libnvidia-ml.so.1"],
        "ldconfig": [],
        "env": {"WSL_DISTRO_NAME": "Ubuntu-22.04"},
        "site": {
            "dists": dict(_CU12_DISTS),
            "build_info": "tensorflow-2.19.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
            "nvidia_libs": _CU12,
        },
    }
    if loader_conf:
        machine["ld_so_conf_d"] = {"ld.wsl.conf": "# This file was automatically generated by WSL.\n/usr/lib/wsl/lib\n"}
        machine["ldconfig"] = [
            "libcuda.so.1 => /usr/lib/wsl/lib/libcuda.so.1",
            "libnvidia-ml.so.1 => /usr/lib/wsl/lib/libnvidia-ml.so.1",
        ]
    return machine


def test_wsl2_without_loader_conf_gets_the_wsl_fix(
    tmp_path: Path, compiled: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    roots = builder.build_machine(tmp_path, "wsl-cli", _wsl_machine(loader_conf=False))
    assert _make_real(tmp_path, compiled) >= 12
    rc, out = _run_cli(monkeypatch, capsys, roots, "--json", "--expect-gpu")
    document = json.loads(out)
    assert rc == 1 and document["verdict"] == "problems"
    findings = {f["id"]: f for f in document["findings"]}
    finding = findings["wsl-libcuda-not-on-loader-path"]
    assert "WSL2" in finding["title"]
    assert finding["fix"] == "echo /usr/lib/wsl/lib | sudo tee /etc/ld.so.conf.d/ld.wsl.conf && sudo ldconfig"
    assert any(e.startswith("WSL: kernel release") for e in finding["evidence"])
    # Never the Linux-driver fixes inside WSL.
    every_fix = " ".join(str(f["fix"]) + " ".join(f["alternatives"]) for f in document["findings"])
    assert "modprobe" not in every_fix and "setup-gpu" not in every_fix and "libcuda-missing" not in findings
    system = document["facts"]["system"]
    assert system["wsl"] is True and system["wsl_loader_conf"] is None
    assert document["facts"]["driver"]["driver_version"] == "566.36"  # the Windows driver, read by nvidia-smi
    share = [lib for lib in document["facts"]["libraries"]["libraries"] if lib["path"].endswith("/wsl/lib/libcuda.so.1")]
    assert share and share[0]["soname"] == "libcuda.so.1"  # read from the ELF file itself


def test_wsl2_with_ld_wsl_conf_is_ready(
    tmp_path: Path, compiled: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    roots = builder.build_machine(tmp_path, "wsl-cli-ok", _wsl_machine(loader_conf=True))
    _make_real(tmp_path, compiled)
    rc, out = _run_cli(monkeypatch, capsys, roots, "--json", "--expect-gpu")
    document = json.loads(out)
    assert (rc, document["verdict"]) == (0, "gpu-ready"), document["findings"]
    assert document["facts"]["system"]["wsl_loader_conf"] == "/etc/ld.so.conf.d/ld.wsl.conf"
    pip_cudart = [l for l in document["facts"]["libraries"]["libraries"] if l["name"] == "libcudart.so.12"]
    assert pip_cudart[0]["soname"] == "libcudart.so.12" and pip_cudart[0]["owner"] == "pip nvidia-cuda-runtime-cu12 12.5.82"


def _conda_machine() -> dict[str, Any]:
    prefix = "/home/user/miniconda3/envs/tf"
    return {
        "python": "3.11.9",
        "glibc": "2.35",
        "nvidia_smi": {"header": "@nvidia-smi/rtx4090_550.90.07.txt", "query": "0, NVIDIA GeForce RTX 4090, 550.90.07, 8.9, 24564\n"},
        "files": ["/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07"],
        "symlinks": {"/usr/lib/x86_64-linux-gnu/libcuda.so.1": "libcuda.so.550.90.07"},
        "ldconfig": ["libcuda.so.1 => /usr/lib/x86_64-linux-gnu/libcuda.so.1"],
        "pci": [{"class": "0x030000"}],
        "dev": ["nvidia0", "nvidiactl"],
        "nvidia_version": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n",
        "conda": {
            "prefix": prefix,
            "packages": [
                {
                    "name": "cudatoolkit",
                    "version": "11.8.0",
                    "build": "h4ba93d1_13",
                    "files": ["lib/libcudart.so.11.8.89"],
                    "links": {"lib/libcudart.so.11.0": "libcudart.so.11.8.89"},
                },
                {
                    "name": "cudnn",
                    "version": "8.9.2.26",
                    "build": "cuda11_0",
                    "files": ["lib/libcudnn.so.8.9.2", "lib/libcudnn.so"],
                    "links": {"lib/libcudnn.so.8": "libcudnn.so.8.9.2"},
                },
            ],
            "activate": {"env_vars.sh": "export LD_LIBRARY_PATH=$CONDA_PREFIX/lib/:$LD_LIBRARY_PATH\n"},
        },
        "site": {
            "dists": {"tensorflow": "2.21.0"},
            "build_info": "tensorflow-2.21.0-cp312-cp312-manylinux_2_27_x86_64.whl",
        },
        "env": {"LD_LIBRARY_PATH": "{root}" + prefix + "/lib/"},
    }


def test_conda_cuda118_under_tf221_names_what_was_found_and_both_ways_out(
    tmp_path: Path, compiled: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    roots = builder.build_machine(tmp_path, "conda-cli", _conda_machine())
    _make_real(tmp_path, compiled)
    rc, out = _run_cli(monkeypatch, capsys, roots, "--json", "--expect-gpu")
    document = json.loads(out)
    assert rc == 1
    finding = {f["id"]: f for f in document["findings"]}["cuda-major-mismatch"]
    assert "needs CUDA 12 / cuDNN 9" in finding["title"] and "CUDA 11.8 / cuDNN 8.9" in finding["title"]
    assert any(
        e.startswith("libcudart.so.12: not found; found libcudart.so.11.0 11.8.89 at ")
        and e.endswith("/envs/tf/lib/libcudart.so.11.0 (conda cudatoolkit 11.8.0 (conda-forge))")
        for e in finding["evidence"]
    ), finding["evidence"]
    assert finding["fix"].startswith("conda install -c conda-forge 'cuda-version=12.5' cuda-cudart libcublas")
    assert any(a.startswith("pip install 'tensorflow==2.14.*'") for a in finding["alternatives"])
    conda = document["facts"]["conda"]
    assert [p["name"] for p in conda["packages"]] == ["cudatoolkit", "cudnn"]
    assert conda["activation_scripts"][0]["applied"] is True
    # libcudnn.so has no version in its name: the version comes from the SONAME in the ELF file.
    dev = [l for l in document["facts"]["libraries"]["libraries"] if l["name"] == "libcudnn.so"]
    assert dev and dev[0]["soname"] == "libcudnn.so.8" and dev[0]["version"] == "8"


def test_human_report_wraps_long_paths_instead_of_cutting_them(
    tmp_path: Path, compiled: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / ("a-rather-long-folder-name-" * 4)
    roots = builder.build_machine(deep, "conda-cli-human", _conda_machine())
    _make_real(deep, compiled)
    monkeypatch.setenv("COLUMNS", "60")
    rc, out = _run_cli(monkeypatch, capsys, roots, "--expect-gpu")
    assert rc == 1
    assert "…" not in out and "ordered-dict" not in out
    cudart = str(deep / "root/home/user/miniconda3/envs/tf/lib/libcudart.so.11.0")
    assert cudart in out  # whole, on one logical line the terminal may wrap
    assert "conda cudatoolkit 11.8.0" in out and "Conda environment" in out
