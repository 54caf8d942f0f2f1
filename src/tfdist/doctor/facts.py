"""The facts the probes collect: plain frozen dataclasses (:func:`tfdist.frozen.frozen`), serialised as they are into
``--json``."""

from __future__ import annotations

from dataclasses import field

from tfdist.frozen import frozen


@frozen
class SystemFacts:
    """Operating system, interpreter and environment."""

    platform: str
    machine: str
    os_name: str | None = None  # PRETTY_NAME of /etc/os-release
    kernel: str | None = None
    glibc: str | None = None
    wsl: bool = False
    wsl_evidence: tuple[str, ...] = ()  # what said WSL2: kernel release, /proc/version, WSL_DISTRO_NAME, /dev/dxg
    wsl_loader_conf: str | None = None  # the /etc/ld.so.conf.d file that puts /usr/lib/wsl/lib on the loader path
    container: str | None = None  # docker, podman, kubernetes, lxc, container
    python_version: str = ""
    python_executable: str = ""
    environment: str = "system"  # venv, conda, system
    environment_prefix: str | None = None
    cuda_visible_devices: str | None = None
    ld_library_path: tuple[str, ...] = ()
    tf_use_legacy_keras: str | None = None


@frozen
class Gpu:
    """One NVIDIA GPU as the driver (or the PCI bus) reports it."""

    index: int
    name: str
    compute_capability: str | None = None
    cc_source: str | None = None  # nvml, nvidia-smi, name-table
    memory_mib: int | None = None


@frozen
class DriverFacts:
    """The NVIDIA driver: what answered, its versions and the GPUs it sees.

    ``source`` is the probe that produced the versions (``nvml``, ``nvidia-smi``, ``proc``) or ``None``.
    ``state`` summarises: ``ok``, ``absent`` (no driver, no device), ``not-loaded`` (device or tools present,
    kernel driver not answering), ``mismatch`` (kernel module and user-space library disagree), ``no-devices``.
    """

    state: str
    source: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the highest CUDA this driver supports ("CUDA Version" of nvidia-smi)
    kernel_module_version: str | None = None  # /proc/driver/nvidia/version
    kernel_module_text: str | None = None
    gpus: tuple[Gpu, ...] = ()
    pci_devices: tuple[str, ...] = ()  # PCI addresses with NVIDIA vendor id and a display/3D class
    dev_nodes: bool = False  # /dev/nvidia0 and friends exist
    nvml_error: str | None = None
    nvidia_smi: str | None = None  # path of the nvidia-smi that was run
    nvidia_smi_error: str | None = None


@frozen
class Library:
    """A CUDA-related shared library file found on this machine."""

    name: str  # the file name as found (soname or full name)
    path: str
    version: str | None
    origin: str  # LD_LIBRARY_PATH, ld-cache, pip:<dist>, cuda-toolkit, wsl, conda
    on_loader_path: bool  # whether a process started from this environment can dlopen() it by soname
    soname: str | None = None  # DT_SONAME read from the ELF file itself
    owner: str | None = None  # who installed it: "pip nvidia-cudnn-cu12 9.3.0.75", "conda cudatoolkit 11.8.0"...


@frozen
class LibraryFacts:
    """CUDA, cuDNN, NCCL and driver libraries found, plus ptxas and toolkits."""

    libraries: tuple[Library, ...] = ()
    toolkits: tuple[str, ...] = ()  # /usr/local/cuda-12.5 ...
    ptxas: str | None = None  # the ptxas found on PATH
    pip_ptxas: str | None = None  # the one shipped by nvidia-cuda-nvcc-cu* in site-packages
    ldconfig: str | None = None  # the ldconfig used for the loader cache, if any


@frozen
class Distribution:
    """An installed Python distribution (from its dist-info folder name, no metadata scan)."""

    name: str
    version: str
    location: str


@frozen
class TensorFlowFacts:
    """What TensorFlow is installed and how it was built (read from files, never imported)."""

    dists: tuple[Distribution, ...] = ()
    package_dir: str | None = None
    build_info_path: str | None = None
    build_info_format: str | None = None  # module-assignments (2.0-2.2), dict (2.3), ordered-dict (2.4+)
    build_info: dict[str, object] = field(default_factory=dict)
    files_owner: str | None = None  # which dist's RECORD matches build_info.py when several are installed
    metapackages: tuple[str, ...] = ()  # dists that only depend on another (Windows 'tensorflow' -> tensorflow-intel)
    keras: str | None = None
    tf_keras: str | None = None
    torch: str | None = None
    torch_cudnn_pin: str | None = None
    nvidia_wheels: dict[str, str] = field(default_factory=dict)  # nvidia-cudnn-cu12 -> 9.3.0.75

    @property
    def version(self) -> str | None:
        """Version of the TensorFlow whose files are on disk (the owner's, else the first dist's)."""
        for dist in self.dists:
            if dist.name == self.files_owner:
                return dist.version
        return self.dists[0].version if self.dists else None

    @property
    def is_cuda_build(self) -> bool | None:
        """build_info's ``is_cuda_build``; ``None`` when build_info could not be read."""
        value = self.build_info.get("is_cuda_build")
        return bool(value) if value is not None else None


@frozen
class CondaPackage:
    """A CUDA-related package recorded in ``$CONDA_PREFIX/conda-meta/<name>-<version>-<build>.json``."""

    name: str
    version: str
    build: str = ""
    channel: str = ""  # conda-forge, nvidia, defaults... (the channel's last path part)
    libraries: tuple[str, ...] = ()  # the shared libraries of interest it installed, relative to the prefix


@frozen
class ActivationScript:
    """A ``$CONDA_PREFIX/etc/conda/activate.d`` script that changes ``LD_LIBRARY_PATH``."""

    path: str
    lines: tuple[str, ...]  # the lines that set LD_LIBRARY_PATH, as written
    folders: tuple[str, ...]  # the folders they add, with $CONDA_PREFIX expanded
    applied: bool  # every such folder is on the current LD_LIBRARY_PATH (the environment was activated since)


@frozen
class CondaFacts:
    """The active conda environment's CUDA packages and activation scripts (empty outside conda)."""

    prefix: str | None = None
    packages: tuple[CondaPackage, ...] = ()
    activation_scripts: tuple[ActivationScript, ...] = ()

    def package(self, name: str) -> CondaPackage | None:
        """The installed package called ``name``, if any."""
        return next((p for p in self.packages if p.name == name), None)


@frozen
class CudaRoot:
    """A folder XLA treats as a CUDA root (or one that could serve as one), and what it holds."""

    path: str
    label: str  # why XLA looks here: "XLA_FLAGS --xla_gpu_cuda_data_dir", "/usr/local/cuda", "the nvidia-cuda-nvcc wheel..."
    libdevice_dir: bool = False  # <path>/nvvm/libdevice is a folder: what XLA tests before choosing the root
    libdevice: bool = False  # <path>/nvvm/libdevice/libdevice.10.bc exists
    ptxas: bool = False  # <path>/bin/ptxas is an executable file


@frozen
class Ptxas:
    """The ptxas XLA will run, as found in XLA's own order, and its ``--version``."""

    path: str
    found_by: str  # "XLA_FLAGS --xla_gpu_cuda_data_dir", "PATH", or the candidate root's label
    version: str | None = None  # "12.5.82"
    version_from: str | None = None  # "ptxas --version", or the package that installed it when that failed
    error: str | None = None  # why --version gave no version (timeout, exit status, unparsable output)
    skipped: tuple[str, ...] = ()  # ptxas binaries found earlier that this XLA refuses: "path (11.5.119: older than 11.8)"


@frozen
class XlaFacts:
    """XLA's GPU toolchain: where it will look for libdevice and ptxas on this machine, and what it will find.

    Empty (``probed`` false) unless a Linux CUDA build of TensorFlow is installed.
    """

    probed: bool = False
    xla_flags: str | None = None  # $XLA_FLAGS as set
    xla_flags_error: str | None = None  # unbalanced quotes and the like
    data_dir: str | None = None  # --xla_gpu_cuda_data_dir from XLA_FLAGS (None: XLA's default ./cuda_sdk_lib)
    tf_xla_flags: str | None = None
    roots: tuple[CudaRoot, ...] = ()  # XLA's candidate roots in its own order, the data dir first and "." last
    libdevice_root: str | None = None  # the root XLA will choose (first whose nvvm/libdevice is a folder)
    ptxas: Ptxas | None = None
    elsewhere: tuple[CudaRoot, ...] = ()  # other folders on this machine holding nvvm/libdevice or bin/ptxas
    loose_libdevice: tuple[str, ...] = ()  # libdevice.10.bc files outside any nvvm/libdevice folder
    nvcc_packages: tuple[str, ...] = ()  # "pip nvidia-cuda-nvcc-cu12 12.5.82", "conda cuda-nvcc 11.3.58 (nvidia)"
    cuda_env: dict[str, str] = field(default_factory=dict)  # CUDA_DIR, CUDA_HOME, CUDA_PATH as set (XLA reads none)


@frozen
class Facts:
    """Everything the probes found."""

    system: SystemFacts
    driver: DriverFacts
    libraries: LibraryFacts
    tensorflow: TensorFlowFacts
    conda: CondaFacts = field(default_factory=CondaFacts)
    xla: XlaFacts = field(default_factory=XlaFacts)
