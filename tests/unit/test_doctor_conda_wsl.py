"""Table tests of the pure parts behind the conda and WSL2 probes: conda-meta records, activation scripts, the ELF
SONAME reader, owner attribution from dpkg records, and the "release built for what is here" query."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tfdist.doctor.elf import read_soname
from tfdist.doctor.facts import CondaFacts, Library
from tfdist.doctor.matching import conda_install_command, releases_for
from tfdist.doctor.owners import attribute_owners
from tfdist.doctor.probe_conda import _channel, read_activation_scripts, read_packages
from tfdist.doctor.probe_system import probe_system
from tfdist.doctor.roots import ProbeRoots
from tfdist.compat import tables as compat


@pytest.mark.parametrize(
    ("record", "channel"),
    [
        ({"channel": "conda-forge"}, "conda-forge"),
        ({"channel": "https://mirror.example.org/anaconda/cloud/conda-forge/linux-64"}, "conda-forge"),
        ({"channel": "https://mirror.example.org/nvidia/label/cuda-12.4.0/noarch"}, "cuda-12.4.0"),
        ({"schannel": "nvidia", "channel": "https://mirror.example.org/nvidia/linux-64"}, "nvidia"),
        ({}, ""),
    ],
)
def test_channel_name_from_either_record_form(record: dict[str, str], channel: str) -> None:
    assert _channel(record) == channel


def _record(meta: Path, name: str, version: str, build: str, files: list[str]) -> None:
    body = {"name": name, "version": version, "build": build, "channel": "conda-forge", "files": files, "depends": []}
    (meta / f"{name}-{version}-{build}.json").write_text(json.dumps(body), encoding="utf-8")


def test_conda_meta_records_only_cuda_packages_and_their_libraries(tmp_path: Path) -> None:
    meta = tmp_path / "conda-meta"
    meta.mkdir()
    _record(meta, "cudatoolkit", "11.8.0", "h4ba93d1_13", ["lib/libcudart.so.11.8.89", "lib/libnvvm.so.4", "include/x.h"])
    _record(meta, "cuda-cudart", "12.6.77", "h5888daf_0", ["lib/libcudart.so.12", "lib/libcudart.so.12.6.77"])
    _record(meta, "numpy", "2.1.0", "py311_0", ["lib/python3.11/site-packages/numpy/__init__.py"])
    (meta / "cudnn-9.3.0.75-broken.json").write_text("{not json", encoding="utf-8")
    (meta / "history").write_text("", encoding="utf-8")
    packages = {p.name: p for p in read_packages(tmp_path)}
    assert set(packages) == {"cudatoolkit", "cuda-cudart"}  # numpy is never parsed, the broken record skipped
    assert packages["cudatoolkit"].libraries == ("lib/libcudart.so.11.8.89",)
    assert packages["cuda-cudart"].version == "12.6.77" and packages["cuda-cudart"].channel == "conda-forge"


@pytest.mark.parametrize(
    ("script", "ld_path", "folders", "applied"),
    [
        ("export LD_LIBRARY_PATH=$CONDA_PREFIX/lib/:$LD_LIBRARY_PATH\n", "{p}/lib", ["{p}/lib"], True),
        ("export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:${CONDA_PREFIX}/lib\n", "", ["{p}/lib"], False),
        (  # the TF 2.12 docs recipe: a command substitution cannot be evaluated, the rest can
            'CUDNN_PATH=$(dirname $(python -c "import nvidia.cudnn;print(nvidia.cudnn.__file__)"))\n'
            "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$CONDA_PREFIX/lib/:$CUDNN_PATH/lib\n",
            "/x:{p}/lib",
            ["{p}/lib"],
            True,
        ),
        ("LD_LIBRARY_PATH='/opt/cuda/lib64'${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}\n", "/opt/cuda/lib64", ["/opt/cuda/lib64"], True),
        ("# export LD_LIBRARY_PATH=/nope\necho $LD_LIBRARY_PATH\n", "", None, None),
    ],
)
def test_activation_scripts_that_set_ld_library_path(
    tmp_path: Path, script: str, ld_path: str, folders: list[str] | None, applied: bool | None
) -> None:
    folder = tmp_path / "etc" / "conda" / "activate.d"
    folder.mkdir(parents=True)
    (folder / "env_vars.sh").write_text(script, encoding="utf-8")
    found = read_activation_scripts(tmp_path, {"LD_LIBRARY_PATH": ld_path.format(p=tmp_path)})
    if folders is None:
        assert found == ()
        return
    assert len(found) == 1
    assert list(found[0].folders) == [f.format(p=tmp_path) for f in folders]
    assert found[0].applied is applied


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_soname_is_read_from_a_real_shared_object(tmp_path: Path) -> None:
    source = tmp_path / "a.c"
    source.write_text("int f(void) { return 1; }\n", encoding="utf-8")
    target = tmp_path / "libcudart.so.11.8.89"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.11.0", "-o", str(target), str(source)], check=True
    )
    assert read_soname(str(target)) == "libcudart.so.11.0"
    truncated = tmp_path / "libcut.so.1"
    truncated.write_bytes(target.read_bytes()[:200])
    assert read_soname(str(truncated)) is None


@pytest.mark.parametrize("body", [b"", b"\x7fELF", b"not an elf at all, just text", b"\x7fELF\x03\x01" + b"\0" * 60])
def test_soname_of_non_elf_or_malformed_files_is_none(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "libx.so.1"
    path.write_bytes(body)
    assert read_soname(str(path)) is None
    assert read_soname(str(tmp_path / "missing.so")) is None


def test_owner_from_dpkg_records_and_conda_meta(tmp_path: Path) -> None:
    info = tmp_path / "var" / "lib" / "dpkg" / "info"
    info.mkdir(parents=True)
    (info / "libcudnn8.list").write_text("/usr/lib/x86_64-linux-gnu/libcudnn.so.8\n", encoding="utf-8")
    (info / "bash.list").write_text("/usr/bin/bash\n", encoding="utf-8")
    (tmp_path / "var" / "lib" / "dpkg" / "status").write_text(
        "Package: bash\nVersion: 5.2\n\nPackage: libcudnn8\nStatus: install ok installed\nVersion: 8.9.7.29-1+cuda12.2\n",
        encoding="utf-8",
    )
    prefix = tmp_path / "env"
    roots = ProbeRoots(sys_root=tmp_path, env={})
    system_lib = Library("libcudnn.so.8", str(tmp_path / "usr/lib/x86_64-linux-gnu/libcudnn.so.8"), "8.9.7", "ld-cache", True)
    conda_lib = Library("libcudart.so.11.0", str(prefix / "lib/libcudart.so.11.0"), "11.8.89", "conda", True)
    pip_lib = Library("libcudnn.so.9", "/site/nvidia/cudnn/lib/libcudnn.so.9", "9.3.0.75", "pip:nvidia-cudnn-cu12", False)
    from tfdist.doctor.facts import CondaPackage

    conda = CondaFacts(
        prefix=str(prefix),
        packages=(CondaPackage("cudatoolkit", "11.8.0", "h4ba93d1_13", "conda-forge", ("lib/libcudart.so.11.0",)),),
    )
    owners = [lib.owner for lib in attribute_owners(roots, [system_lib, conda_lib, pip_lib], conda)]
    assert owners == [
        "dpkg libcudnn8 8.9.7.29-1+cuda12.2",
        "conda cudatoolkit 11.8.0 (conda-forge)",
        "pip nvidia-cudnn-cu12 9.3.0.75",
    ]


@pytest.mark.parametrize(
    ("cuda", "cudnn", "python", "newest"),
    [
        ("11.8", "8.9", "3.11", "2.14"),  # conda cudatoolkit 11.8 + cudnn 8.9
        ("11.8", "8.6", "3.11", "2.13"),  # cuDNN 8.6 is older than 2.14's 8.7
        ("11.2", "8.1", "3.8", "2.11"),
        ("12.3", "8.9", "3.11", "2.17"),
        ("12.6", "9.3", "3.12", "2.21"),
        ("12.3", "9.1", "3.11", None),  # cuDNN 9.1 is older than the 9.3 every cuDNN-9 build needs
        ("13.0", "9.14", "3.12", None),  # no release is built for CUDA 13
        ("12.6", None, "3.12", "2.21"),  # cuDNN not found: match on CUDA alone
    ],
)
def test_release_built_for_what_is_here(cuda: str, cudnn: str | None, python: str, newest: str | None) -> None:
    found = releases_for(cuda, cudnn, python)
    assert (found[-1] if found else None) == newest


@pytest.mark.parametrize(
    ("version", "command"),
    [
        (
            "2.21",
            "conda install -c conda-forge 'cuda-version=12.5' cuda-cudart libcublas libcufft libcurand libcusolver "
            "libcusparse libnvjitlink cuda-nvcc 'cudnn>=9.3,<10'",
        ),
        ("2.13", "conda install -c conda-forge cudatoolkit=11.8 'cudnn>=8.6,<9'"),
        ("2.3", "conda install -c conda-forge cudatoolkit=10.1 'cudnn>=7.6,<8'"),
    ],
)
def test_conda_packages_for_a_release(version: str, command: str) -> None:
    assert conda_install_command(compat.tf_build(version)) == command


@pytest.mark.parametrize(
    ("kernel", "proc_version", "env", "dev_dxg", "said"),
    [
        ("5.15.167.4-microsoft-standard-WSL2", "Linux version 5.15.167.4-microsoft-standard-WSL2", {}, True, 3),
        ("6.8.0-45-generic", "Linux version 6.8.0-45-generic (buildd@lcy02)", {}, False, 0),
        ("6.6.36.3-microsoft-standard-WSL2+", "Linux version 6.6.36.3", {"WSL_DISTRO_NAME": "Ubuntu"}, False, 2),
        ("6.8.0-45-generic", "Linux version 6.8.0-45-generic", {}, True, 1),  # /dev/dxg alone says WSL2
    ],
)
def test_wsl2_detection_names_each_source(
    tmp_path: Path, kernel: str, proc_version: str, env: dict[str, str], dev_dxg: bool, said: int
) -> None:
    proc, root = tmp_path / "proc", tmp_path / "root"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "sys" / "kernel" / "osrelease").write_text(kernel + "\n", encoding="utf-8")
    (proc / "version").write_text(proc_version + "\n", encoding="utf-8")
    (root / "etc" / "ld.so.conf.d").mkdir(parents=True)
    (root / "etc" / "ld.so.conf.d" / "ld.wsl.conf").write_text("# generated by WSL\n/usr/lib/wsl/lib\n", encoding="utf-8")
    if dev_dxg:
        (root / "dev").mkdir()
        (root / "dev" / "dxg").write_text("", encoding="utf-8")
    facts = probe_system(ProbeRoots(proc=proc, sys_root=root, env=env, platform="linux"), "/usr/bin/python3")
    assert len(facts.wsl_evidence) == said and facts.wsl is (said > 0)
    assert facts.wsl_loader_conf == ("/etc/ld.so.conf.d/ld.wsl.conf" if said else None)


def _facts_with_conda_lib(tf_package: str | None):  # type: ignore[no-untyped-def]
    from tfdist.doctor.facts import CondaPackage, DriverFacts, Facts, LibraryFacts, SystemFacts, TensorFlowFacts

    lib = Library("libcudnn.so.8", "/env/lib/libcudnn.so.8", "8.9.7", "conda", False)
    packages = (CondaPackage("cudnn", "8.9.7.29", "h1", "conda-forge", ("lib/libcudnn.so.8",)),)
    if tf_package:
        packages += (CondaPackage(tf_package, "2.17.0", "cuda120py311h1", "conda-forge", ()),)
    return Facts(
        system=SystemFacts(platform="linux", machine="x86_64"),
        driver=DriverFacts(state="absent"),
        libraries=LibraryFacts(libraries=(lib,)),
        tensorflow=TensorFlowFacts(),
        conda=CondaFacts(prefix="/env", packages=packages),
    )


@pytest.mark.parametrize(("tf_package", "visible"), [(None, False), ("tensorflow-base", True), ("tensorflow", True)])
def test_conda_lib_counts_as_loadable_only_for_tensorflow_from_conda(tf_package: str | None, visible: bool) -> None:
    from tfdist.doctor.context import build_context

    assert ("libcudnn.so.8" in build_context(_facts_with_conda_lib(tf_package)).loader) is visible


def test_fixes_quote_a_conda_prefix_with_a_space(tmp_path: Path) -> None:
    import importlib.util
    import shlex

    from tfdist.doctor.core import DoctorConfig, run_doctor

    builder_path = Path(__file__).parents[1] / "fixtures" / "doctor" / "builder.py"
    spec = importlib.util.spec_from_file_location("doctor_builder_q", builder_path)
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    machine = builder.load_scenario("conda-tf29-libcudart-in-env-lib")["machine"]
    machine["conda"]["prefix"] = "/home/a user/miniconda3/envs/tf 2.9"
    machine["env"] = {}
    roots = builder.build_machine(tmp_path, "quoted", machine)
    report = run_doctor(DoctorConfig(roots=roots))
    finding = next(f for f in report.findings if f.id == "cuda-libraries-missing")
    words = shlex.split(finding.fix or "")
    prefix = str(roots.sys_root / "home/a user/miniconda3/envs/tf 2.9")
    assert f"{prefix}/etc/conda/activate.d" in words and prefix in words, finding.fix
