"""``tfdist doctor --recommend``: the newest TensorFlow this machine's driver, GPU, Python and glibc can run."""

from __future__ import annotations

from tfdist.compat import tables as compat
from tfdist.doctor.facts import Facts
from tfdist.compat.versions import at_least, vtuple
from tfdist.frozen import frozen


@frozen
class Recommendation:
    """The suggested TensorFlow release and how to install it.

    Attributes:
        version: the minor release (``"2.21"``), or ``None`` when no official build fits.
        gpu: whether the command installs the CUDA libraries (a usable NVIDIA GPU was found).
        command: the install command for pip's default index.
        mirror_command: the same pinned to the configured mirror, when one is configured.
        index_url: the configured mirror.
        skipped: why each newer release was ruled out, newest first.
        notes: caveats (Blackwell GPUs, system CUDA needed before 2.14, Windows, macOS).
    """

    version: str | None
    gpu: bool
    command: str | None
    mirror_command: str | None = None
    index_url: str | None = None
    skipped: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def cc_support(cc: str, compiled: tuple[str, ...] | list[str]) -> str:
    """How a GPU of compute capability ``cc`` runs a build compiled for ``compiled``.

    Returns:
        ``"sass"`` (native code for its architecture), ``"ptx"`` (JIT-compiled from PTX on first use),
        ``"none"`` (no usable code: TF ignores or fails on the GPU) or ``"unknown"`` (nothing recorded).
    """
    if not compiled:
        return "unknown"
    parts = vtuple(cc)
    if len(parts) < 2:
        return "unknown"
    have = (parts[0], parts[1])
    for arch in compiled:
        kind, _, number = arch.partition("_")
        if (
            kind == "sm"
            and number.isdigit()
            and divmod(int(number), 10)[0] == have[0]
            and divmod(int(number), 10)[1] <= have[1]
        ):
            return "sass"
    for arch in compiled:
        kind, _, number = arch.partition("_")
        if kind == "compute" and number.isdigit() and divmod(int(number), 10) <= have:
            return "ptx"
    return "none"


def officially_unsupported(cc: str, tf_version: str) -> bool:
    """Whether official wheels of ``tf_version`` are known not to run on GPUs of ``cc`` (Blackwell)."""
    rule = compat.load_data("gpus")["official_tf_unsupported"]
    return at_least(cc, rule["min_cc"]) and vtuple(tf_version)[:2] <= vtuple(rule["through_tf"])[:2]


def install_command(version: str, *, gpu: bool, index_url: str | None = None) -> str:
    """``pip install 'tensorflow[and-cuda]==2.21.*' 'tf-keras==2.21.*'`` and its variants.

    The ``[and-cuda]`` extra exists from 2.14; tf-keras is added from 2.16, where Keras 3 became the default and
    multi-worker training needs tf-keras.
    """
    build = compat.tf_build(version)
    minor = build.version
    words = ["pip", "install"]
    if index_url:
        words += ["--index-url", index_url]
    if gpu and vtuple(minor) >= (2, 14):
        words.append(f"'tensorflow[and-cuda]=={minor}.*'")
    elif gpu:
        words.append(f"'{build.gpu_dist}=={minor}.*'")
    else:
        words.append(f"'tensorflow=={minor}.*'")
    if vtuple(minor) >= (2, 16):
        words.append(f"'tf-keras=={minor}.*'")
    return " ".join(words)


def minimum_driver(cuda: str, *, wsl: bool) -> str | None:
    """The oldest driver that runs software built with CUDA ``cuda`` (minor-version compatibility floor).

    Under WSL2 the driver is the Windows one: its numbers follow the Windows column, and TensorFlow's install guide
    asks for at least 528.33 there for CUDA 12. ``None`` when the tables have no such driver.
    """
    from tfdist.errors import UsageError

    try:
        floor = compat.min_driver_for_cuda(cuda, minor_compat=True, windows=wsl)
    except UsageError:
        return None
    if wsl and vtuple(cuda)[0] >= 12:
        floor = max(floor, compat.wsl_windows_driver_min(), key=vtuple)
    return floor


def _blockers(build: compat.TfBuild, facts: Facts, gpu: bool) -> list[str]:
    system, driver = facts.system, facts.driver
    reasons = []
    if not build.supports_python(system.python_version):
        reasons.append(f"needs Python {build.python_min}-{build.python_max} (have {system.python_version})")
    if system.glibc and not at_least(system.glibc, build.glibc_min):
        reasons.append(f"needs glibc >= {build.glibc_min} (have {system.glibc})")
    if gpu and build.cuda_full:
        floor = minimum_driver(build.cuda_full, wsl=system.wsl)
        if floor and not at_least(driver.driver_version, floor):
            reasons.append(f"needs NVIDIA driver >= {floor} for CUDA {build.cuda} (have {driver.driver_version})")
        for device in driver.gpus:
            if not device.compute_capability:
                continue
            if officially_unsupported(device.compute_capability, build.version):
                reasons.append(
                    f"official wheels do not support {device.name} (compute capability {device.compute_capability})"
                )
            elif cc_support(device.compute_capability, build.compute_capabilities) == "none":
                reasons.append(f"not compiled for compute capability {device.compute_capability} ({device.name})")
    return reasons


def recommend(facts: Facts, index_url: str | None = None, *, expect_gpu: bool = False) -> Recommendation:
    """Pick the newest official TensorFlow release this machine can run, on its GPU when it has a usable one."""
    system, driver = facts.system, facts.driver
    if system.platform == "darwin":
        return Recommendation(
            None,
            False,
            "pip install tensorflow tensorflow-metal",
            notes=("macOS has no CUDA; tensorflow-metal runs TensorFlow on Apple GPUs",),
        )
    windows = system.platform == "win32"
    gpu = driver.state == "ok" and bool(driver.gpus) and not windows
    skipped: list[str] = []
    notes: list[str] = []
    chosen = None
    for version in reversed(compat.known_tf_versions()):
        reasons = _blockers(compat.tf_build(version), facts, gpu)
        if not reasons:
            chosen = version
            break
        skipped.append(f"{version}: " + "; ".join(reasons))
    if chosen is None and gpu:
        notes.append("no official release runs on this GPU and driver; falling back to the CPU")
        cpu = recommend_cpu(facts)
        if cpu is not None:
            chosen, gpu = cpu, False
    if windows:
        notes.append("native Windows has no CUDA build after 2.10: use WSL2 for the GPU")
    for device in driver.gpus:
        if device.compute_capability and chosen and officially_unsupported(device.compute_capability, chosen):
            rule = compat.load_data("gpus")["official_tf_unsupported"]
            notes.append(
                f"{device.name}: run the NGC container instead: docker run --gpus all -it --rm {rule['container']}"
            )
            break
    if chosen and gpu and vtuple(chosen) < (2, 14):
        build = compat.tf_build(chosen)
        notes.append(f"TensorFlow {chosen} needs a system CUDA {build.cuda} and cuDNN {build.cudnn} on the loader path")
    if expect_gpu and not gpu:
        notes.append("no usable NVIDIA GPU was found, so this is a CPU install")
    if chosen is None:
        return Recommendation(None, False, None, skipped=tuple(skipped), notes=tuple(notes))
    return Recommendation(
        version=chosen,
        gpu=gpu,
        command=install_command(chosen, gpu=gpu),
        mirror_command=install_command(chosen, gpu=gpu, index_url=index_url) if index_url else None,
        index_url=index_url,
        skipped=tuple(skipped),
        notes=tuple(notes),
    )


def recommend_cpu(facts: Facts) -> str | None:
    """Newest release whose Python and glibc requirements this machine meets (no GPU constraints)."""
    for version in reversed(compat.known_tf_versions()):
        if not _blockers(compat.tf_build(version), facts, gpu=False):
            return version
    return None
