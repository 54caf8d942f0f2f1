"""Derived facts the checks share: the installed build, which GPUs are usable, where each library resolves."""

from __future__ import annotations

from dataclasses import field, replace

from tfdist.compat import tables as compat
from tfdist.doctor.facts import Facts, Library
from tfdist.doctor.keras_choice import XlaExposure, xla_exposure
from tfdist.compat.versions import minor_of, vtuple
from tfdist.errors import UsageError
from tfdist.frozen import frozen


@frozen
class Context:
    """Everything the checks compute once from :class:`Facts`."""

    facts: Facts
    expect_gpu: bool
    build: compat.TfBuild | None = None
    tf_version: str | None = None
    cuda: str | None = None
    cudnn_major: str | None = None
    compiled: tuple[str, ...] = ()
    loader: dict[str, Library] = field(default_factory=dict)
    xla_exposure: XlaExposure | None = None  # the Keras training will run under and what XLA compiles in its fit

    @property
    def linux(self) -> bool:
        """Linux, including WSL2."""
        return self.facts.system.platform.startswith("linux")

    @property
    def tf_installed(self) -> bool:
        """At least one TensorFlow distribution (or the package itself) is present."""
        tf = self.facts.tensorflow
        return bool(tf.dists) or tf.package_dir is not None

    @property
    def cuda_build(self) -> bool:
        """The installed TensorFlow files are a CUDA build."""
        return self.facts.tensorflow.is_cuda_build is True

    @property
    def gpu_present(self) -> bool:
        """An NVIDIA GPU is on this machine, whether or not its driver works."""
        driver = self.facts.driver
        return bool(driver.gpus or driver.pci_devices or driver.kernel_module_version) or driver.state in (
            "not-loaded",
            "mismatch",
        )

    @property
    def gpu_wanted(self) -> bool:
        """The user asked for the GPU, or there is one to use."""
        return self.expect_gpu or self.gpu_present

    @property
    def driver_ok(self) -> bool:
        """The driver answered and lists GPUs."""
        return self.facts.driver.state == "ok" and bool(self.facts.driver.gpus)

    @property
    def pip_libs_visible(self) -> bool:
        """Whether this TF finds pip's nvidia-* libraries by itself (2.14+, except the broken 2.16 releases)."""
        if self.tf_version is None or vtuple(self.tf_version)[:2] < (2, 14):
            return False
        broken = compat.load_data("cuda_libs")["pip_cuda_path_broken"]["versions"]
        return minor_of(self.tf_version) not in broken


_CONDA_TF_PACKAGES = ("tensorflow", "tensorflow-base", "tensorflow-gpu")


def _loader_view(facts: Facts, pip_visible: bool) -> dict[str, Library]:
    """Soname -> the file a dlopen() from TensorFlow would get: LD_LIBRARY_PATH first, then TF's own run path
    into site-packages/nvidia (when it works), then the ldconfig cache."""
    view: dict[str, Library] = {}
    libs = facts.libraries.libraries
    ordered = [lib for lib in libs if lib.origin == "LD_LIBRARY_PATH"]
    if pip_visible:
        ordered += [lib for lib in libs if lib.origin.startswith("pip")]
    ordered += [lib for lib in libs if lib.origin == "ld-cache"]
    # TensorFlow installed as a conda package finds $CONDA_PREFIX/lib through its own run path.
    conda_tf = any(p.name in _CONDA_TF_PACKAGES for p in facts.conda.packages)
    for lib in libs:
        reachable = lib.on_loader_path or (conda_tf and lib.origin == "conda")
        if lib.origin in ("cuda-toolkit", "wsl", "conda") and reachable:
            ordered.append(lib)
    for lib in ordered:
        view.setdefault(lib.name, lib)
    return view


def build_context(facts: Facts, *, expect_gpu: bool = False) -> Context:
    """Work out the installed build and the library resolution once for all checks."""
    tf = facts.tensorflow
    build = None
    if tf.version:
        try:
            build = compat.tf_build(tf.version)
        except UsageError:
            build = None  # a nightly or a future release: rely on its build_info alone
    info = tf.build_info
    cuda = info.get("cuda_version") or (build.cuda_full if build else None)
    cudnn = info.get("cudnn_version") or (build.cudnn_major if build else None)
    compiled = info.get("cuda_compute_capabilities") or (build.compute_capabilities if build else ())
    context = Context(
        facts=facts,
        expect_gpu=expect_gpu,
        build=build,
        tf_version=tf.version,
        cuda=str(cuda) if cuda else None,
        cudnn_major=str(cudnn).split(".")[0] if cudnn else None,
        compiled=tuple(str(c) for c in compiled),  # type: ignore[union-attr]
        xla_exposure=xla_exposure(tf.version, tf.tf_keras, facts.system.tf_use_legacy_keras) if tf.version else None,
    )
    # The loader's view depends on the release (pip_libs_visible), so it is added once that is known.
    return replace(context, loader=_loader_view(facts, context.pip_libs_visible))
