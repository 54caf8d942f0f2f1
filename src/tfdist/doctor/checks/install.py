"""Checks of the platform and the installed TensorFlow: which distribution, which build, Python, glibc, Keras
(causes 1, 4, 5, 6 and 18 of compat-data.md section C)."""

from __future__ import annotations


from tfdist.compat import tables as compat
from tfdist.doctor.context import Context
from tfdist.doctor.keras_choice import legacy_selected
from tfdist.doctor.findings import ERROR, INFO, WARNING, Finding
from tfdist.doctor.recommend import recommend
from tfdist.compat.versions import at_least, minor_of, vtuple
from tfdist.doctor.checks.common import gpu_severity, reinstall_command


def check_platform(ctx: Context) -> list[Finding]:
    """macOS and native Windows: no CUDA build of TensorFlow exists there (causes 1 and 18)."""
    system = ctx.facts.system
    if system.platform == "darwin":
        return [
            Finding(
                "macos-no-cuda",
                ERROR if ctx.expect_gpu else INFO,
                "macOS has no CUDA: TensorFlow runs on the CPU",
                (f"platform: {system.platform}",),
                fix="pip install tensorflow tensorflow-metal",
                detail="tensorflow-metal is Apple's plug-in that runs TensorFlow on Apple GPUs.",
            )
        ]
    if system.platform != "win32" or not ctx.tf_installed:
        return []
    names = {d.name for d in ctx.facts.tensorflow.dists}
    version = ctx.tf_version or ""
    if vtuple(version)[:2] >= (2, 11) or "tensorflow-intel" in names or ctx.facts.tensorflow.is_cuda_build is False:
        return [
            Finding(
                "windows-native-no-cuda",
                gpu_severity(ctx),
                f"TensorFlow {version} on native Windows has no CUDA build: it will not use the GPU",
                (
                    "platform: win32",
                    f"installed: {', '.join(sorted(names))} {version}",
                    f"build_info is_cuda_build: {ctx.facts.tensorflow.is_cuda_build}",
                ),
                fix="wsl --install",
                alternatives=(
                    "pip install 'tensorflow<2.11'  # Python <= 3.10 with CUDA 11.2 and cuDNN 8.1",
                    "pip install tensorflow-cpu tensorflow-directml-plugin",
                ),
                detail="GPU support on native Windows ended with TF 2.10. In WSL2, run: "
                "pip install 'tensorflow[and-cuda]'.",
            )
        ]
    return []


def check_installation(ctx: Context) -> list[Finding]:
    """Which TensorFlow is installed: none, several at once, CPU-only, or files without metadata (causes 4, 6)."""
    tf = ctx.facts.tensorflow
    findings: list[Finding] = []
    if not ctx.tf_installed:
        rec = recommend(ctx.facts)
        return [
            Finding(
                "tensorflow-not-installed",
                INFO,
                "TensorFlow is not installed in this Python environment",
                (f"python: {ctx.facts.system.python_executable}",),
                fix=rec.command,
                detail="tfdist doctor --recommend explains the choice of version.",
            )
        ]
    if tf.dists and tf.build_info_path is None:
        findings.append(
            Finding(
                "tensorflow-files-missing",
                ERROR,
                "A TensorFlow distribution is registered but its files are gone",
                tuple(f"{d.name} {d.version}: {d.location}" for d in tf.dists),
                fix=f"pip install --force-reinstall {reinstall_command(ctx, gpu=ctx.gpu_wanted).split(' ', 2)[2]}",
            )
        )
    shipping = [d for d in tf.dists if d.name not in tf.metapackages]
    if len(shipping) > 1:
        versions = {d.version for d in shipping}
        owner = tf.files_owner
        owner_kind = compat.load_data("tf_distributions")["distributions"].get(owner or "", {}).get("kind")
        severity = ERROR if len(versions) > 1 or (owner_kind == "cpu" and ctx.gpu_wanted) else WARNING
        evidence = [f"{d.name} {d.version} ({d.location})" for d in shipping]
        evidence.append(
            f"tensorflow/python/platform/build_info.py on disk comes from: {owner or 'none of them (mixed files)'}"
        )
        names = " ".join(d.name for d in tf.dists)
        findings.append(
            Finding(
                "several-tensorflow-distributions",
                severity,
                f"{len(shipping)} TensorFlow distributions share one 'tensorflow' package folder",
                tuple(evidence),
                fix=f"pip uninstall -y {names} && {reinstall_command(ctx, gpu=ctx.linux and ctx.gpu_wanted)}",
                detail="Each one overwrites the other's files; the last installed wins and uninstalling one breaks the "
                "other. tf-keras depends on 'tensorflow', so 'tensorflow-cpu' next to it always brings both.",
            )
        )
    if "tensorflow-gpu" in {d.name for d in tf.dists} and vtuple(ctx.tf_version or "")[:2] >= (2, 1):
        findings.append(
            Finding(
                "tensorflow-gpu-retired",
                INFO,
                "'tensorflow-gpu' is a retired name",
                ("installed: tensorflow-gpu",),
                fix="pip uninstall -y tensorflow-gpu && " + reinstall_command(ctx, gpu=True),
                detail="Since 2.1 it is the same as 'tensorflow'; pip install tensorflow-gpu fails since Dec 2022.",
            )
        )
    if ctx.linux and tf.is_cuda_build is False:
        cpu_names = [d.name for d in tf.dists if d.name != "tensorflow"] or [d.name for d in tf.dists]
        findings.append(
            Finding(
                "cpu-only-build",
                gpu_severity(ctx),
                f"The installed TensorFlow {ctx.tf_version or ''} is a CPU-only build".replace("  ", " "),
                (
                    f"{tf.build_info_path}: is_cuda_build = False",
                    f"installed: {', '.join(d.name for d in tf.dists) or 'unknown'}",
                ),
                fix=f"pip uninstall -y {' '.join(cpu_names) or 'tensorflow'} && {reinstall_command(ctx, gpu=True)}",
                detail=None if ctx.gpu_wanted else "Fine on this machine: it has no NVIDIA GPU.",
            )
        )
    return findings


def check_python_glibc(ctx: Context) -> list[Finding]:
    """Python or glibc outside the installed wheel's range (cause 5)."""
    build, system = ctx.build, ctx.facts.system
    if build is None or not ctx.tf_installed:
        return []
    findings = []
    rec = recommend(ctx.facts)
    if not build.supports_python(system.python_version):
        findings.append(
            Finding(
                "python-unsupported",
                ERROR,
                f"TensorFlow {build.version} supports Python {build.python_min}-{build.python_max}, "
                f"this is {system.python_version}",
                (
                    f"python: {system.python_executable} {system.python_version}",
                    f"TF {build.version} Python range (tested build configurations)",
                ),
                fix=rec.command,
                alternatives=(f"uv venv --python {build.python_max} .venv",),
            )
        )
    if ctx.linux and system.glibc and not at_least(system.glibc, build.glibc_min):
        findings.append(
            Finding(
                "glibc-too-old",
                ERROR,
                f"TensorFlow {build.version} needs glibc >= {build.glibc_min}, this system has {system.glibc}",
                (f"glibc: {system.glibc}", f"TF {build.version} wheel tag: {build.platform_tag}"),
                fix=rec.command,
                detail="pip refuses the wheel (or it fails to import); an older release or a newer OS fixes it.",
            )
        )
    return findings


def check_keras(ctx: Context) -> list[Finding]:
    """Keras 3 active where multi-worker training needs tf-keras."""
    tf, system = ctx.facts.tensorflow, ctx.facts.system
    if not ctx.tf_installed or vtuple(ctx.tf_version or "")[:2] < (2, 16) or not tf.keras or vtuple(tf.keras)[0] < 3:
        return []
    legacy = legacy_selected(system.tf_use_legacy_keras)
    minor = minor_of(ctx.tf_version or "")
    if tf.tf_keras is None and legacy:
        return [
            Finding(
                "legacy-keras-without-tf-keras",
                ERROR,
                "TF_USE_LEGACY_KERAS=1 but tf-keras is not installed: tf.keras fails to import",
                (f"TF_USE_LEGACY_KERAS={system.tf_use_legacy_keras!r}", "tf-keras: not installed"),
                fix=f"pip install 'tf-keras=={minor}.*'",
                alternatives=("unset TF_USE_LEGACY_KERAS",),
            )
        ]
    if tf.tf_keras is None:
        return [
            Finding(
                "keras3-multiworker",
                WARNING,
                f"Keras {tf.keras} is tf.keras and tf-keras is not installed",
                (f"keras {tf.keras}", "tf-keras: not installed"),
                fix=f"pip install 'tf-keras=={minor}.*' && export TF_USE_LEGACY_KERAS=1",
                detail="Keras 3 does not run multi-worker model.fit under MultiWorkerMirroredStrategy; tf-keras does.",
            )
        ]
    findings = []
    if minor_of(tf.tf_keras) != minor:
        findings.append(
            Finding(
                "tf-keras-version-mismatch",
                WARNING,
                f"tf-keras {tf.tf_keras} does not match TensorFlow {ctx.tf_version}",
                (f"tf-keras {tf.tf_keras}", f"tensorflow {ctx.tf_version}"),
                fix=f"pip install 'tf-keras=={minor}.*'",
            )
        )
    if not legacy:
        findings.append(
            Finding(
                "keras3-active",
                INFO,
                f"tf.keras is Keras {tf.keras}; tf-keras {tf.tf_keras} is installed but not selected",
                (
                    f"TF_USE_LEGACY_KERAS={system.tf_use_legacy_keras!r}"
                    if system.tf_use_legacy_keras is not None
                    else "TF_USE_LEGACY_KERAS: unset",
                ),
                fix="export TF_USE_LEGACY_KERAS=1",
                detail="Needed for multi-worker training; "
                "tfdist launch sets it for its tasks when tf-keras is installed.",
            )
        )
    return findings
